/*
 * rpcweb.h - gRPC-Web and Connect on the HTTP port, answered by the gRPC server's own handlers.
 *
 * Browsers cannot speak gRPC (HTTP/2 trailers), so Parca's web client, Grafana's Parca data source
 * and Connect clients speak one of two HTTP/1.1-friendly variants. This module registers, for
 * every service of an rpc_server, a prefix route "/<package.Service>/" on an http_server and hands
 * each POST to the same handler a gRPC call of the method would reach (rpc_server_call_bridged):
 * one implementation per method, whichever transport brought the call.
 *
 * Protocols, chosen by the request's Content-Type:
 *   - gRPC-Web, binary: application/grpc-web or application/grpc-web+proto. The body is one
 *     length-prefixed message frame (flag byte 0, 4-byte big-endian length, message); the answer
 *     is 200 application/grpc-web+proto with the response frame (when OK) and a trailer frame
 *     (flag 0x80) holding "grpc-status", "grpc-message" (percent-encoded) and the call's trailer.
 *     A compressed frame (flag 1) is refused: this server announces no grpc-encoding.
 *   - gRPC-Web, text: application/grpc-web-text(+proto): the same frames in base64, both ways.
 *   - Connect, unary, binary: application/proto. The body is the message; the answer is 200
 *     application/proto with the response, or the Connect error: the HTTP status for the code
 *     and {"code": "not_found", "message": "..."} as application/json. The call's trailer is a
 *     "trailer-<key>" header.
 *   - Connect, unary, JSON: application/json, the messages in the proto3 JSON mapping (lib/pbjson)
 *     for the methods of the services given to rpcweb_set_json_services; others are
 *     UNIMPLEMENTED. Answers and errors as for the binary codec, with application/json.
 * Metadata (x-scope-orgid, authorization, ...) are the request's HTTP headers; authentication
 * happened in the HTTP server (http_server_options.auth), as the gRPC server does it for gRPC. A
 * deadline comes from grpc-timeout (gRPC-Web) or connect-timeout-ms (Connect).
 *
 * Lifecycle: rpcweb_new after the rpc_server's methods are registered and before http_server_start;
 * rpcweb_close before rpc_server_shutdown (calls arriving after it get UNAVAILABLE, and none is
 * between its check and the rpc server); rpcweb_free after http_server_stop.
 */
#ifndef STRATA_RPCWEB_H
#define STRATA_RPCWEB_H

#include <protobuf-c/protobuf-c.h>

#include "common/error.h"
#include "http/http.h"
#include "rpc/rpc.h"

typedef struct rpcweb rpcweb;

int rpcweb_new(http_server *http, rpc_server *rpc, rpcweb **out, strata_error *err);
/* The services whose methods Connect's JSON codec may call (their descriptors give the message
 * types); the array must outlive w. */
void rpcweb_set_json_services(rpcweb *w, const ProtobufCServiceDescriptor *const *services,
                              size_t n);
void rpcweb_close(rpcweb *w);
void rpcweb_free(rpcweb *w);

#endif
