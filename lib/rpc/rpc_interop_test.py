#!/usr/bin/python3
"""Interop test: Python grpcio (an independent gRPC implementation) against the C rpc server.

Usage: /usr/bin/python3 rpc_interop_test.py path/to/rpc_echo_server
Starts the server, reads "PORT <n>" from it, runs the checks, closes its stdin and expects it to
shut down cleanly with exit status 0.
"""
import subprocess
import sys
import unittest

import grpc

SERVER = None
PORT = None


def identity(b):
    return b


class InteropTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.channel = grpc.insecure_channel(
            "127.0.0.1:%d" % PORT,
            options=[("grpc.max_receive_message_length", 64 << 20),
                     ("grpc.max_send_message_length", 64 << 20)])

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()

    def method(self, path):
        return self.channel.unary_unary(path, request_serializer=identity,
                                        response_deserializer=identity)

    def test_echo(self):
        self.assertEqual(self.method("/test.Echo/Echo")(b"hello interop", timeout=10),
                         b"hello interop")
        self.assertEqual(self.method("/test.Echo/Echo")(b"", timeout=10), b"")

    def test_second_service(self):
        self.assertEqual(self.method("/test.Other/Upper")(b"abc", timeout=10), b"ABC")

    def test_metadata(self):
        md = (("x-scope-orgid", "tenant-py"),)
        self.assertEqual(self.method("/test.Echo/Metadata")(b"X-Scope-OrgID", metadata=md,
                                                             timeout=10), b"tenant-py")

    def test_error_status_and_message(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.method("/test.Echo/Fail")(b"from python", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.details(), "bad request: from python")

    def test_unimplemented(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.method("/test.Nope/Nope")(b"x", timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(cm.exception.details(), "unknown method /test.Nope/Nope")

    def test_async_and_deadline(self):
        self.assertEqual(self.method("/test.Async/Delay")(b"50:late", timeout=10), b"late")
        with self.assertRaises(grpc.RpcError) as cm:
            self.method("/test.Async/Delay")(b"2000:x", timeout=0.2)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_large_payload(self):
        payload = bytes((i * 7 + (i >> 16)) & 0xFF for i in range(10 << 20))
        self.assertEqual(self.method("/test.Echo/Echo")(payload, timeout=60), payload)


def main():
    global SERVER, PORT
    SERVER = subprocess.Popen([sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = SERVER.stdout.readline().decode()
    if not line.startswith("PORT "):
        print("server did not report its port: %r" % line, file=sys.stderr)
        SERVER.kill()
        return 1
    PORT = int(line.split()[1])
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    SERVER.stdin.close()
    rc = SERVER.wait(timeout=30)
    if rc != 0:
        print("server exited with %d" % rc, file=sys.stderr)
    return 0 if result.wasSuccessful() and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
