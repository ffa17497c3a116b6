/*
 * agents.h - the registry behind AgentsService/Agents: who pushed, when, how long it took, and
 * the last error, as Parca keeps it. An agent is identified by its `node` label and the peer
 * address ("node-1 127.0.0.1"); pushers without a node label by the peer alone. Entries idle for
 * more than five minutes are dropped when the list is read.
 */
#ifndef STRATA_INGESTER_AGENTS_H
#define STRATA_INGESTER_AGENTS_H

#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

typedef struct agent_registry agent_registry;

#define AGENT_IDLE_EXPIRY_NS (INT64_C(300) * 1000000000)

int agent_registry_new(agent_registry **out, strata_error *err);
void agent_registry_free(agent_registry *r);
/* Records a push that ended at now_ns and took duration_ns; error_message NULL or "" on success. */
int agent_registry_record(agent_registry *r, const char *node, const char *peer, int64_t now_ns,
                          int64_t duration_ns, const char *error_message, strata_error *err);
/* Serializes an AgentsResponse (parca.profilestore.v1alpha1) of the live entries, sorted by id. */
int agent_registry_encode_response(agent_registry *r, int64_t now_ns, strata_buffer *out,
                                   strata_error *err);

/* Writes {"agents":[{"id","last_push" (RFC 3339),"last_push_duration" (seconds),"last_error"}]}
 * of the live entries, sorted by id (the web UI's agents table). */
int agent_registry_encode_json(agent_registry *r, int64_t now_ns, strata_buffer *out,
                               strata_error *err);

#endif
