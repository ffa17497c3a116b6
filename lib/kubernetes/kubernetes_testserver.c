/*
 * kubernetes_testserver.c - the fake API server as a child process (see the header).
 */
#include "kubernetes_testserver.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buffer.h"

static const char *source_dir(void) {
    const char *dir = getenv("STRATA_SOURCE_DIR");
    return dir != NULL ? dir : ".";
}

int kubernetes_testserver_start(kubernetes_testserver *s, int https, const char *const *args) {
    memset(s, 0, sizeof *s);
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/kubernetes/fake_apiserver.py", source_dir());
    const char *argv[32] = {"/usr/bin/python3", script};
    size_t argc = 2;
    for (size_t i = 0; args != NULL && args[i] != NULL && argc + 1 < 32; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    int out[2];
    if (pipe(out) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* A failed assertion skips the stop call: the server goes when the test process does. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    int ok = f != NULL && fscanf(f, "%d %d", &s->api_port, &s->control_port) == 2;
    if (f != NULL)
        fclose(f);
    else
        close(out[0]);
    s->pid = pid;
    if (!ok) {
        kubernetes_testserver_stop(s);
        return -1;
    }
    snprintf(s->url, sizeof s->url, "%s://127.0.0.1:%d", https ? "https" : "http", s->api_port);
    return 0;
}

void kubernetes_testserver_stop(kubernetes_testserver *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

static size_t collect(char *data, size_t size, size_t nmemb, void *userdata) {
    return strata_buffer_append(userdata, data, size * nmemb) == 0 ? size * nmemb : 0;
}

static char *request(const kubernetes_testserver *s, const char *path, const char *json) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->control_port, path);
    CURL *h = curl_easy_init();
    if (h == NULL)
        return NULL;
    strata_buffer body = STRATA_BUFFER_INIT;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    if (json != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    long status = 0;
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    char *text = rc == CURLE_OK && status == 200 ? strata_buffer_detach(&body, NULL) : NULL;
    strata_buffer_free(&body);
    return text;
}

int kubernetes_testserver_post(const kubernetes_testserver *s, const char *path, const char *json) {
    char *reply = request(s, path, json != NULL ? json : "{}");
    free(reply);
    return reply != NULL ? 0 : -1;
}

char *kubernetes_testserver_get(const kubernetes_testserver *s, const char *path) {
    return request(s, path, NULL);
}

int kubernetes_testserver_make_certs(char *dir, size_t dir_len) {
    snprintf(dir, dir_len, "/tmp/strata-k8s-certs-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    char command[8192];
    snprintf(command, sizeof command, "%s/tests/kubernetes/make_certs.sh '%s'", source_dir(), dir);
    return system(command) == 0 ? 0 : -1;
}
