/*
 * kubernetes_testserver.h - test support: runs tests/kubernetes/fake_apiserver.py (a fake API
 * server answering pod list and watch in the official JSON shapes) as a child process and scripts
 * it through its control port. Used by the kubernetes and agent tests; not part of any service.
 */
#ifndef STRATA_KUBERNETES_TESTSERVER_H
#define STRATA_KUBERNETES_TESTSERVER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct kubernetes_testserver {
    pid_t pid;
    int api_port;
    int control_port;
    char url[64]; /* http(s)://127.0.0.1:PORT */
} kubernetes_testserver;

/* Starts the server with extra arguments (NULL-terminated list, may be NULL); with https the url
 * starts with https://. Finds the script through STRATA_SOURCE_DIR. 0 or -1. */
int kubernetes_testserver_start(kubernetes_testserver *s, int https, const char *const *args);
void kubernetes_testserver_stop(kubernetes_testserver *s);
/* POSTs json to a control path ("/apply", "/delete", ...); 0 on HTTP 200. */
int kubernetes_testserver_post(const kubernetes_testserver *s, const char *path, const char *json);
/* GETs a control path; the body (malloc'd, NUL-terminated) or NULL. */
char *kubernetes_testserver_get(const kubernetes_testserver *s, const char *path);
/* Creates a temporary directory holding ca.crt, server.crt/key, client.crt/key and other-ca.crt
 * (tests/kubernetes/make_certs.sh); dir receives its path. 0 or -1. */
int kubernetes_testserver_make_certs(char *dir, size_t dir_len);

#endif
