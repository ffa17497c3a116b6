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
 * Translated routes serve plain-HTTP APIs older than gRPC (Pyroscope's POST /ingest) with a gRPC
 * method's own handler: the route's translate function, on an HTTP handler thread, turns the
 * request into the method's request message; the call then runs as any bridged call (request
 * headers as metadata, no deadline), and the answer is 200 with an empty body when it succeeds,
 * otherwise the HTTP status for its code (http_status_from_strata) with its message. A failed
 * translation is answered the same way, without a call.
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
/* Builds the request message for a translated route into message; -1 with the error to answer. May
 * block (it runs on an HTTP handler thread). */
typedef int (*rpcweb_translate_fn)(void *ctx, const http_request *req, strata_buffer *message,
                                   strata_error *err);
/* POST (or http_method) at path, an exact route, answered by rpc_method after translate. Call
 * after rpcweb_new and before http_server_start; ctx must outlive w. */
int rpcweb_add_translated_route(rpcweb *w, const char *http_method, const char *path,
                                const char *rpc_method, rpcweb_translate_fn translate, void *ctx,
                                strata_error *err);
void rpcweb_close(rpcweb *w);
void rpcweb_free(rpcweb *w);

#endif
