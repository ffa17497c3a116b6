#!/usr/bin/python3
"""Uploaded sources and the SOURCE report (issue 19): Parca's DebuginfoService on `strata all`,
driven by Python grpcio as parca-debuginfo drives it (ShouldInitiateUpload, InitiateUpload, the
client-streaming Upload in chunks, MarkUploadFinished), then QueryService/Query with a
source_reference: source_only asks whether sources exist, REPORT_TYPE_SOURCE answers the file's
text and an Arrow record of per-line cumulative and flat values.

Data: one CPU profile of a binary with build id b1d whose functions live in src/app.c (main,
work) and src/lib.c (helper, inlined into work at line 8):
  main@3 > work@7                 10   (work@7 is the leaf)
  main@3 > work@8 > helper@2       5   (helper inlined: the leaf is in lib.c)
  main@3 > work@7 > work@7         2   (recursion: line 7 counts twice, as Parca counts it)
so src/app.c's line 3 has cumulative 17, line 7 cumulative 14 and flat 12, line 8 cumulative 5.
"""
import gzip
import io
import json
import os
import struct
import sys
import tarfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.debuginfo.v1alpha1 import debuginfo_pb2 as dpb  # noqa: E402
from parca.debuginfo.v1alpha1 import debuginfo_pb2_grpc as d_grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from perftools.profiles import profile_pb2  # noqa: E402

TENANT = [("x-scope-orgid", "sources")]
OTHER = [("x-scope-orgid", "other-team")]
BUILD = "b1d0000000000000000000000000000000000001"
APP_C = "".join(f"/* line {i} */\n" for i in range(1, 11))
LIB_C = "int helper(void) {\n    return 1;\n}\n"
SOURCES = dpb.DEBUGINFO_TYPE_SOURCES


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, 10**9)
    return t


def archive(files):
    """A .tar.gz as tarfile (a real tar writer) makes it, names as given."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, text in files.items():
            data = text if isinstance(text, bytes) else text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def profile(t_ns):
    p = profile_pb2.Profile()
    strings = [""]

    def s(text):
        if text not in strings:
            strings.append(text)
        return strings.index(text)
    p.sample_type.add(type=s("samples"), unit=s("count"))
    p.sample_type.add(type=s("cpu"), unit=s("nanoseconds"))
    p.period_type.type, p.period_type.unit = s("cpu"), s("nanoseconds")
    p.period, p.time_nanos, p.duration_nanos = qc.PERIOD, t_ns, qc.DURATION
    p.mapping.add(id=1, memory_start=0x400000, memory_limit=0x800000, filename=s("/usr/bin/app"),
                  build_id=s(BUILD), has_functions=True, has_line_numbers=True)
    p.function.add(id=1, name=s("main"), system_name=s("main"), filename=s("src/app.c"),
                   start_line=1)
    p.function.add(id=2, name=s("work"), system_name=s("work"), filename=s("src/app.c"),
                   start_line=5)
    p.function.add(id=3, name=s("helper"), system_name=s("helper"), filename=s("src/lib.c"),
                   start_line=1)
    main = p.location.add(id=1, mapping_id=1, address=0x401000)
    main.line.add(function_id=1, line=3)
    work7 = p.location.add(id=2, mapping_id=1, address=0x402000)
    work7.line.add(function_id=2, line=7)
    inl = p.location.add(id=3, mapping_id=1, address=0x403000)
    inl.line.add(function_id=3, line=2)  # innermost first: helper inlined into work at line 8
    inl.line.add(function_id=2, line=8)
    for stack, n in (([2, 1], 10), ([3, 1], 5), ([2, 2, 1], 2)):
        p.sample.add(location_id=stack, value=[n, n * qc.PERIOD])
    p.string_table.extend(strings)
    return gzip.compress(p.SerializeToString())


def upload(stub, build, data, chunk=100, kind=SOURCES, metadata=TENANT):
    def messages():
        yield dpb.UploadRequest(info=dpb.UploadInfo(build_id=build, upload_id="u1", type=kind))
        for i in range(0, len(data), chunk):
            yield dpb.UploadRequest(chunk_data=data[i:i + chunk])
    return stub.Upload(messages(), metadata=metadata, timeout=60)


def int64_column(values):
    return struct.pack(f"<{len(values)}q", *values)


class SourcesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("sources")
        cls.channel = cls.local.channel
        cls.debuginfo = d_grpc.DebuginfoServiceStub(cls.channel)
        cls.query = q_grpc.QueryServiceStub(cls.channel)
        cls.t_ns = 1767225600 * 10**9
        ps_grpc.ProfileStoreServiceStub(cls.channel).WriteRaw(
            qc.write_request([({"__name__": "process_cpu", "job": "src"}, [profile(cls.t_ns)])]),
            metadata=TENANT, timeout=30)
        cls.archive = archive({"./src/app.c": APP_C, "src/lib.c": LIB_C, "README": "hi\n",
                               "src/odd.c": b"a\x00b\n\xff\n"})
        cls.uploaded = False

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def ensure_uploaded(self):
        if not SourcesTest.uploaded:
            r = upload(self.debuginfo, BUILD, self.archive)
            self.assertEqual((r.build_id, r.size), (BUILD, len(self.archive)))
            SourcesTest.uploaded = True

    def merge(self, report, ref=None, metadata=TENANT):
        return self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=report, source_reference=ref,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 10**9))),
            metadata=metadata, timeout=60)

    def test_1_upload_protocol(self):
        build = "f00d" * 10
        should = self.debuginfo.ShouldInitiateUpload(
            dpb.ShouldInitiateUploadRequest(build_id=build, type=SOURCES), metadata=TENANT)
        self.assertTrue(should.should_initiate_upload, should.reason)
        init = self.debuginfo.InitiateUpload(dpb.InitiateUploadRequest(
            build_id=build, size=len(self.archive), type=SOURCES), metadata=TENANT)
        ins = init.upload_instructions
        self.assertEqual(ins.upload_strategy, dpb.UploadInstructions.UPLOAD_STRATEGY_GRPC)
        self.assertEqual((ins.build_id, ins.type, len(ins.upload_id)), (build, SOURCES, 32))
        with self.assertRaises(grpc.RpcError) as e:  # not uploaded yet
            self.debuginfo.MarkUploadFinished(dpb.MarkUploadFinishedRequest(
                build_id=build, upload_id=ins.upload_id, type=SOURCES), metadata=TENANT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        r = upload(self.debuginfo, build, self.archive, chunk=37)
        self.assertEqual(r.size, len(self.archive))
        self.debuginfo.MarkUploadFinished(dpb.MarkUploadFinishedRequest(
            build_id=build, upload_id=ins.upload_id, type=SOURCES), metadata=TENANT)
        should = self.debuginfo.ShouldInitiateUpload(
            dpb.ShouldInitiateUploadRequest(build_id=build, type=SOURCES), metadata=TENANT)
        self.assertFalse(should.should_initiate_upload)
        self.assertIn("already uploaded", should.reason)
        with self.assertRaises(grpc.RpcError) as e:
            self.debuginfo.InitiateUpload(dpb.InitiateUploadRequest(
                build_id=build, size=10, type=SOURCES), metadata=TENANT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.ALREADY_EXISTS)
        forced = self.debuginfo.ShouldInitiateUpload(dpb.ShouldInitiateUploadRequest(
            build_id=build, type=SOURCES, force=True), metadata=TENANT)
        self.assertTrue(forced.should_initiate_upload)
        # Another tenant has no sources for that build.
        other = self.debuginfo.ShouldInitiateUpload(
            dpb.ShouldInitiateUploadRequest(build_id=build, type=SOURCES), metadata=OTHER)
        self.assertTrue(other.should_initiate_upload)

    def test_2_refusals(self):
        should = self.debuginfo.ShouldInitiateUpload(dpb.ShouldInitiateUploadRequest(
            build_id=BUILD, type=dpb.DEBUGINFO_TYPE_EXECUTABLE), metadata=TENANT)
        self.assertFalse(should.should_initiate_upload)
        self.assertIn("only sources", should.reason)
        cases = [
            (lambda: upload(self.debuginfo, "abc", b"not an archive at all"), "gzip nor zstd"),
            (lambda: upload(self.debuginfo, "abc", gzip.compress(b"x" * 2000)), "checksum"),
            (lambda: upload(self.debuginfo, "abc", self.archive[:len(self.archive) // 2]),
             "source archive"),
            (lambda: upload(self.debuginfo, "../../etc", self.archive), "segment"),
            (lambda: upload(self.debuginfo, "abc", self.archive, kind=dpb.DEBUGINFO_TYPE_EXECUTABLE),
             "only sources"),
            (lambda: self.debuginfo.InitiateUpload(dpb.InitiateUploadRequest(
                build_id="abc", size=1 << 40, type=SOURCES), metadata=TENANT),
             "max_source_upload_bytes"),
        ]
        for call, words in cases:
            with self.assertRaises(grpc.RpcError) as e:
                call()
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, words)
            self.assertIn(words, e.exception.details())
        # A stream that starts with a chunk, not the info.
        with self.assertRaises(grpc.RpcError) as e:
            self.debuginfo.Upload(iter([dpb.UploadRequest(chunk_data=b"x")]), metadata=TENANT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # Nothing of the refused uploads was stored.
        should = self.debuginfo.ShouldInitiateUpload(
            dpb.ShouldInitiateUploadRequest(build_id="abc", type=SOURCES), metadata=TENANT)
        self.assertTrue(should.should_initiate_upload)

    def test_3_source_only(self):
        ref = qpb.SourceReference(build_id="feed" * 10, filename="src/app.c", source_only=True)
        with self.assertRaises(grpc.RpcError) as e:
            self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE, ref)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("no sources uploaded", e.exception.details())
        self.ensure_uploaded()
        ref.build_id = BUILD
        r = self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE, ref)
        self.assertEqual(r.WhichOneof("report"), "source")
        self.assertEqual((r.source.source, r.source.record), ("", b""))
        with self.assertRaises(grpc.RpcError) as e:  # tenants do not share sources
            self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE, ref, metadata=OTHER)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_4_source_report(self):
        self.ensure_uploaded()
        for name in ("src/app.c", "/src/app.c"):
            r = self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE,
                           qpb.SourceReference(build_id=BUILD, filename="src/app.c"))
            self.assertEqual(r.source.source, APP_C, name)
        self.assertEqual(r.source.unit, "nanoseconds")
        self.assertEqual(r.total, 17 * qc.PERIOD)
        rec = r.source.record
        self.assertEqual(rec[:4], b"\xff\xff\xff\xff")
        for col in (b"cumulative", b"flat"):
            self.assertIn(col, rec)
        cumulative = [0] * 10
        flat = [0] * 10
        cumulative[2], cumulative[6], cumulative[7], flat[6] = 17, 14, 5, 12
        self.assertIn(int64_column([v * qc.PERIOD for v in cumulative]), rec)
        self.assertIn(int64_column([v * qc.PERIOD for v in flat]), rec)
        # lib.c: helper@2 is the leaf of the inlined frame.
        r = self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE,
                       qpb.SourceReference(build_id=BUILD, filename="src/lib.c"))
        self.assertEqual(r.source.source, LIB_C)
        self.assertIn(int64_column([0, 5 * qc.PERIOD, 0]), r.source.record)
        # A file that is not UTF-8 (a NUL, a stray byte) comes back repaired, its lines kept.
        r = self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE,
                       qpb.SourceReference(build_id=BUILD, filename="src/odd.c"))
        self.assertEqual(r.source.source, "a\ufffdb\n\ufffd\n")
        self.assertEqual(len(lib.arrow_rows([r.source.record])[0]["rows"]), 2)  # its 2 lines
        with self.assertRaises(grpc.RpcError) as e:
            self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE,
                       qpb.SourceReference(build_id=BUILD, filename="src/missing.c"))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("src/missing.c", e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.merge(qpb.QueryRequest.REPORT_TYPE_SOURCE)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_5_connect_json(self):
        """The unary methods answer Connect JSON on the HTTP port like every other service."""
        req = urllib.request.Request(
            self.local.http + "/parca.debuginfo.v1alpha1.DebuginfoService/ShouldInitiateUpload",
            data=json.dumps({"buildId": "cafe", "type": "DEBUGINFO_TYPE_EXECUTABLE"}).encode(),
            headers={"Content-Type": "application/json", "X-Scope-OrgID": "sources"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = json.loads(r.read())
        self.assertNotIn("shouldInitiateUpload", body)  # false: omitted in proto3 JSON
        self.assertIn("only sources", body["reason"])


if __name__ == "__main__":
    unittest.main()
