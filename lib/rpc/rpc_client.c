/*
 * rpc_client.c - the blocking unary gRPC client; see rpc.h.
 *
 * Each call gets its own pluck completion queue and runs as one batch of all six client
 * operations, so calls on one channel are independent and need no locking here (grpc channels are
 * thread-safe).
 */
#include <ctype.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <stdlib.h>
#include <string.h>

#include "common/textfile.h"
#include "common/tsan.h"
#include "rpc/rpc.h"
#include "rpc/rpc_internal.h"

struct rpc_channel {
    grpc_channel *grpc;
    char *authorization; /* "Bearer <token>", sent with every call; NULL = none */
};

static bool is_set(const char *s) {
    return s != NULL && s[0] != '\0';
}

/* TLS channel credentials from the options' PEM files. */
static grpc_channel_credentials *tls_credentials(const rpc_channel_options *o, strata_error *err) {
    if (is_set(o->tls_cert_file) != is_set(o->tls_key_file)) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT,
                         "rpc: a client certificate needs both tls cert and key files");
        return NULL;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    grpc_channel_credentials *creds = NULL;
    if ((is_set(o->tls_ca_file) &&
         strata_textfile_read(o->tls_ca_file, "rpc: tls CA file", &ca, NULL, err) != 0) ||
        (is_set(o->tls_cert_file) &&
         (strata_textfile_read(o->tls_cert_file, "rpc: tls cert file", &cert, NULL, err) != 0 ||
          strata_textfile_read(o->tls_key_file, "rpc: tls key file", &key, NULL, err) != 0)))
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    creds = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL, NULL, NULL);
    if (creds == NULL)
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "rpc: grpc refused the TLS settings");
out:
    free(ca);
    free(cert);
    free(key);
    return creds;
}

/* Reads the token file into ch->authorization ("Bearer <token>", whitespace around it dropped). */
static int read_bearer_token(rpc_channel *ch, const char *path, strata_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (strata_textfile_read(path, "rpc: bearer token file", &text, &len, err) != 0)
        return -1;
    const char *start = text;
    while (len > 0 && isspace((unsigned char)start[0]))
        start++, len--;
    while (len > 0 && isspace((unsigned char)start[len - 1]))
        len--;
    bool printable = len > 0;
    for (size_t i = 0; i < len; i++)
        printable = printable && start[i] > ' ' && start[i] < 0x7f;
    if (!printable) {
        free(text);
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rpc: bearer token file %s: want one token of printable ASCII",
                                path);
    }
    ch->authorization = malloc(len + sizeof "Bearer ");
    if (ch->authorization == NULL) {
        free(text);
        return strata_error_oom(err);
    }
    memcpy(ch->authorization, "Bearer ", 7);
    memcpy(ch->authorization + 7, start, len);
    ch->authorization[7 + len] = '\0';
    free(text);
    return 0;
}

rpc_channel *rpc_channel_new(const char *target, const rpc_channel_options *options,
                             strata_error *err) {
    if (target == NULL || target[0] == '\0') {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "rpc: channel target missing");
        return NULL;
    }
    rpc_channel *ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    grpc_init();
    grpc_arg args[3];
    rpc_message_size_args(args, options != NULL ? options->max_receive_message_bytes : 0,
                          options != NULL ? options->max_send_message_bytes : 0);
    grpc_channel_args channel_args = {2, args};
    bool tls = options != NULL && (options->tls || is_set(options->tls_ca_file) ||
                                   is_set(options->tls_cert_file) || is_set(options->tls_key_file));
    if (tls && is_set(options->tls_server_name)) {
        args[2].type = GRPC_ARG_STRING;
        args[2].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[2].value.string = (char *)options->tls_server_name;
        channel_args.num_args = 3;
    }
    if (options != NULL && is_set(options->bearer_token_file) &&
        read_bearer_token(ch, options->bearer_token_file, err) != 0) {
        free(ch);
        grpc_shutdown();
        return NULL;
    }
    grpc_channel_credentials *creds =
        tls ? tls_credentials(options, err) : grpc_insecure_credentials_create();
    if (creds == NULL) {
        free(ch->authorization);
        free(ch);
        grpc_shutdown();
        return NULL;
    }
    ch->grpc = grpc_channel_create(target, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    return ch;
}

void rpc_channel_free(rpc_channel *ch) {
    if (ch == NULL)
        return;
    grpc_channel_destroy(ch->grpc);
    free(ch->authorization);
    free(ch);
    grpc_shutdown();
}

/* The per-call state of rpc_call_unary, so cleanup is one function. */
typedef struct unary_call {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata *metadata;
    size_t metadata_count;
    grpc_byte_buffer *request;
    grpc_byte_buffer *response;
    grpc_metadata_array initial_metadata;
    grpc_metadata_array trailing_metadata;
    grpc_status_code status;
    grpc_slice details;
} unary_call;

static void unary_call_cleanup(unary_call *u) {
    for (size_t i = 0; i < u->metadata_count; i++) {
        grpc_slice_unref(u->metadata[i].key);
        grpc_slice_unref(u->metadata[i].value);
    }
    free(u->metadata);
    if (u->request != NULL)
        grpc_byte_buffer_destroy(u->request);
    if (u->response != NULL)
        grpc_byte_buffer_destroy(u->response);
    grpc_metadata_array_destroy(&u->initial_metadata);
    grpc_metadata_array_destroy(&u->trailing_metadata);
    grpc_slice_unref(u->details);
    if (u->call != NULL)
        grpc_call_unref(u->call);
    grpc_completion_queue_shutdown(u->cq);
    grpc_completion_queue_destroy(u->cq);
}

static grpc_slice lowercase_slice(const char *s) {
    size_t len = strlen(s);
    grpc_slice slice = grpc_slice_malloc(len);
    uint8_t *p = GRPC_SLICE_START_PTR(slice);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)tolower((unsigned char)s[i]);
    return slice;
}

static int build_metadata(unary_call *u, const rpc_metadata *md, size_t n,
                          const char *authorization, strata_error *err) {
    if (n == 0 && authorization == NULL)
        return 0;
    u->metadata = calloc(n + 1, sizeof(*u->metadata));
    if (u->metadata == NULL)
        return strata_error_oom(err);
    if (authorization != NULL) {
        u->metadata[0].key = grpc_slice_from_static_string("authorization");
        u->metadata[0].value = grpc_slice_from_copied_string(authorization);
        u->metadata_count++;
    }
    for (size_t i = 0; i < n; i++) {
        grpc_metadata *m = &u->metadata[u->metadata_count];
        m->key = lowercase_slice(md[i].key);
        m->value = grpc_slice_from_copied_buffer(md[i].value, md[i].value_len);
        u->metadata_count++;
        if (!grpc_header_key_is_legal(m->key))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "rpc: illegal metadata key \"%s\"", md[i].key);
        if (!grpc_is_binary_header(m->key) && !grpc_header_nonbin_value_is_legal(m->value))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "rpc: illegal value for metadata key \"%s\"", md[i].key);
    }
    return 0;
}

static void fill_ops(unary_call *u, grpc_op ops[6]) {
    memset(ops, 0, 6 * sizeof(*ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = u->metadata_count;
    ops[0].data.send_initial_metadata.metadata = u->metadata;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->request;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial_metadata;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->response;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing_metadata;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
}

static int run_batch(unary_call *u, strata_error *err) {
    grpc_op ops[6];
    fill_ops(u, ops);
    strata_tsan_release(u);
    grpc_call_error e = grpc_call_start_batch(u->call, ops, 6, u, NULL);
    if (e != GRPC_CALL_OK)
        return strata_error_set(err, STRATA_INTERNAL, "rpc: cannot start call: %s",
                                grpc_call_error_to_string(e));
    grpc_event ev = grpc_completion_queue_pluck(u->cq, u, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    strata_tsan_acquire(u);
    if (ev.type != GRPC_OP_COMPLETE)
        return strata_error_set(err, STRATA_INTERNAL, "rpc: completion queue failed");
    return 0;
}

static int status_to_error(const unary_call *u, const char *method, strata_error *err) {
    strata_status code = rpc_status_from_grpc(u->status);
    size_t len = GRPC_SLICE_LENGTH(u->details);
    if (len == 0)
        return strata_error_set(err, code, "%s: %s", method, strata_status_name(code));
    int shown = len > STRATA_ERROR_MESSAGE_MAX ? STRATA_ERROR_MESSAGE_MAX : (int)len;
    return strata_error_set(err, code, "%.*s", shown,
                            (const char *)GRPC_SLICE_START_PTR(u->details));
}

static int copy_response(grpc_byte_buffer *bb, strata_buffer *out, strata_error *err) {
    strata_buffer_reset(out);
    if (bb == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "rpc: OK status without a response");
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return strata_error_set(err, STRATA_INTERNAL, "rpc: cannot decompress the response");
    if (strata_buffer_reserve(out, grpc_byte_buffer_length(bb)) != 0) {
        grpc_byte_buffer_reader_destroy(&reader);
        return strata_error_oom(err);
    }
    grpc_slice slice;
    while (grpc_byte_buffer_reader_next(&reader, &slice)) {
        int rc = strata_buffer_append(out, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice));
        grpc_slice_unref(slice);
        if (rc != 0) {
            grpc_byte_buffer_reader_destroy(&reader);
            return strata_error_oom(err);
        }
    }
    grpc_byte_buffer_reader_destroy(&reader);
    return 0;
}

/* Sets u up and creates its call of method on ch (0), or fails with err set; u needs
 * unary_call_cleanup either way. */
static int call_open(rpc_channel *ch, unary_call *u, const char *method,
                     const rpc_metadata *metadata, size_t metadata_count, int64_t timeout_ns,
                     strata_error *err) {
    memset(u, 0, sizeof(*u));
    u->cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_metadata_array_init(&u->initial_metadata);
    grpc_metadata_array_init(&u->trailing_metadata);
    u->details = grpc_empty_slice();
    if (build_metadata(u, metadata, metadata_count, ch->authorization, err) != 0)
        return -1;
    grpc_slice path = grpc_slice_from_copied_string(method);
    u->call = grpc_channel_create_call(ch->grpc, NULL, GRPC_PROPAGATE_DEFAULTS, u->cq, path, NULL,
                                       rpc_deadline_after(timeout_ns), NULL);
    grpc_slice_unref(path);
    return 0;
}

/* The call's outcome (rc: how running it went) into err or response; frees u. */
static int call_close(unary_call *u, int rc, const char *method, strata_buffer *response,
                      strata_error *err) {
    if (rc == 0 && u->status != GRPC_STATUS_OK)
        rc = status_to_error(u, method, err);
    if (rc == 0)
        rc = copy_response(u->response, response, err);
    unary_call_cleanup(u);
    return rc;
}

int rpc_call_unary(rpc_channel *ch, const char *method, const void *request, size_t request_len,
                   const rpc_metadata *metadata, size_t metadata_count, int64_t timeout_ns,
                   strata_buffer *response, strata_error *err) {
    unary_call u;
    int rc = call_open(ch, &u, method, metadata, metadata_count, timeout_ns, err);
    if (rc == 0) {
        grpc_slice body = grpc_slice_from_copied_buffer(request, request_len);
        u.request = grpc_raw_byte_buffer_create(&body, 1);
        grpc_slice_unref(body);
        rc = run_batch(&u, err);
    }
    return call_close(&u, rc, method, response, err);
}

/* Runs one batch of ops on u's call and waits for it; *ok: whether grpc says it succeeded. */
static int run_ops(unary_call *u, const grpc_op *ops, size_t n, bool *ok, strata_error *err) {
    strata_tsan_release(u);
    grpc_call_error e = grpc_call_start_batch(u->call, ops, n, u, NULL);
    if (e != GRPC_CALL_OK)
        return strata_error_set(err, STRATA_INTERNAL, "rpc: cannot start a batch: %s",
                                grpc_call_error_to_string(e));
    grpc_event ev = grpc_completion_queue_pluck(u->cq, u, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    strata_tsan_acquire(u);
    if (ev.type != GRPC_OP_COMPLETE)
        return strata_error_set(err, STRATA_INTERNAL, "rpc: completion queue failed");
    *ok = ev.success != 0;
    return 0;
}

/* Sends the messages one batch each; stops early (without error) once the call has failed, whose
 * status the caller then receives. */
static int send_stream(unary_call *u, const rpc_stream_message *messages, size_t n,
                       strata_error *err) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    op.data.send_initial_metadata.count = u->metadata_count;
    op.data.send_initial_metadata.metadata = u->metadata;
    bool ok = true;
    if (run_ops(u, &op, 1, &ok, err) != 0)
        return -1;
    for (size_t i = 0; i < n && ok; i++) {
        grpc_slice body = grpc_slice_from_copied_buffer(messages[i].data, messages[i].len);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&body, 1);
        grpc_slice_unref(body);
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = bb;
        int rc = run_ops(u, &op, 1, &ok, err);
        grpc_byte_buffer_destroy(bb);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int rpc_call_client_stream(rpc_channel *ch, const char *method, const rpc_stream_message *messages,
                           size_t n_messages, const rpc_metadata *metadata, size_t metadata_count,
                           int64_t timeout_ns, strata_buffer *response, strata_error *err) {
    unary_call u;
    int rc = call_open(ch, &u, method, metadata, metadata_count, timeout_ns, err);
    if (rc == 0)
        rc = send_stream(&u, messages, n_messages, err);
    if (rc == 0) {
        grpc_op ops[6];
        fill_ops(&u, ops); /* ops[2..5]: close, then the answer */
        bool ok;
        rc = run_ops(&u, ops + 2, 4, &ok, err);
    }
    return call_close(&u, rc, method, response, err);
}
