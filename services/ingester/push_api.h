/*
 * push_api.h - Grafana Pyroscope's push.v1.PusherService/Push on the ingester: what Grafana Alloy
 * and the newer Pyroscope SDKs send, over gRPC and (through lib/rpcweb) Connect.
 *
 * A PushRequest is a WriteRawRequest in other words: series of labels (`__name__` names the
 * profile, `service_name` the application) and raw pprof profiles. Push turns it into the
 * WriteRawRequest it means (labels into a LabelSet, each sample's pprof as is; the client's
 * profile ID and any annotations are not kept) and hands that to WriteRaw's own path, so a push
 * gets the same validation, limits, tenant rule, acknowledgement after durability and error
 * messages. A PushResponse, like a WriteRawResponse, is empty.
 */
#ifndef STRATA_PUSH_API_H
#define STRATA_PUSH_API_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

#define PUSH_METHOD "/push.v1.PusherService/Push"

/* Appends to out the WriteRawRequest meaning the PushRequest request[0..len); INVALID_ARGUMENT
 * when it is not a PushRequest. */
int push_to_write_raw(const uint8_t *request, size_t len, strata_buffer *out, strata_error *err);

#endif
