/*
 * debuginfo_service.h - Parca's parca.debuginfo.v1alpha1.DebuginfoService on the ingester's gRPC
 * server: source archives uploaded for the SOURCE report (lib/debuginfo).
 *
 * What it accepts. Strata symbolizes where profiles are made (the agent, the Go runtime), not on
 * the server, so executables and debug information would only cost storage: ShouldInitiateUpload
 * answers false for them, saying so, and InitiateUpload and Upload refuse them with
 * INVALID_ARGUMENT. Sources (DEBUGINFO_TYPE_SOURCES: a tar archive compressed with gzip or zstd,
 * as `parca-debuginfo source` makes them) are stored per tenant at
 * <tenant>/debuginfo/<build id>/sources.
 *
 * The calls, as Parca's agent and parca-debuginfo make them:
 *   ShouldInitiateUpload  true when the build has no sources yet (or force); false with the reason
 *   InitiateUpload        checks the build id, type and size (max_source_upload_bytes); answers
 *                         instructions for the GRPC upload strategy with a fresh upload id, or
 *                         ALREADY_EXISTS when the sources are there and force is not set
 *   Upload                a client stream: an UploadInfo, then the archive in chunks. The archive
 *                         is checked whole (every tar header, lib/debuginfo) before it is stored,
 *                         and the call is answered only once the object is durable in the bucket
 *   MarkUploadFinished    OK when the sources are stored, NOT_FOUND otherwise
 * Uploads are stateless between calls (any ingester behind a load balancer can take each of
 * them): the upload id is not checked against InitiateUpload's.
 *
 * Calls touch the bucket, so each runs on a thread of its own, at most
 * DEBUGINFO_MAX_CALLS_IN_FLIGHT at once (more are refused with RESOURCE_EXHAUSTED, which clients
 * retry). An Upload is collected in memory up to max_source_upload_bytes before it is checked, and
 * at most DEBUGINFO_MAX_UPLOADS_IN_FLIGHT are held at once (lib/rpc refuses more with
 * RESOURCE_EXHAUSTED before reading them), so uploads hold at most 4 x max_source_upload_bytes.
 */
#ifndef STRATA_DEBUGINFO_SERVICE_H
#define STRATA_DEBUGINFO_SERVICE_H

#include <stdint.h>

#include "bucket/bucket.h"
#include "common/error.h"
#include "metrics/metrics.h"
#include "rpc/rpc.h"

#define DEBUGINFO_SERVICE "/parca.debuginfo.v1alpha1.DebuginfoService/"
#define DEBUGINFO_MAX_CALLS_IN_FLIGHT 8
/* Uploads held at once (each up to max_source_upload_bytes in memory); more are refused. */
#define DEBUGINFO_MAX_UPLOADS_IN_FLIGHT 4

typedef struct debuginfo_service debuginfo_service;

/* The bucket and registry must outlive the service. max_upload_bytes > 0. */
int debuginfo_service_new(bucket *store, uint64_t max_upload_bytes, metrics_registry *registry,
                          debuginfo_service **out, strata_error *err);
/* Registers the four methods on server (before it starts). */
int debuginfo_service_register(debuginfo_service *s, rpc_server *server, strata_error *err);
/* Waits for the calls in flight (call after the gRPC server has shut down), then frees. */
void debuginfo_service_free(debuginfo_service *s);

#endif
