/*
 * source_archive_fuzz.c - libFuzzer target: arbitrary bytes as an uploaded source archive (what
 * DebuginfoService/Upload accepts and the SOURCE report reads). Neither may crash, leak or read
 * out of bounds; finding in an archive that checks fails only as NOT_FOUND or for the file's size.
 */
#include <stdint.h>
#include <stdlib.h>

#include "debuginfo/debuginfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    strata_error err;
    strata_buffer out = STRATA_BUFFER_INIT;
    size_t files = 0;
    int checked = source_archive_check(data, size, &files, &err);
    int found = source_archive_find(data, size, "src/main.c", 1 << 20, &out, &err);
    (void)files;
    if (checked == 0 && found != 0 && err.code != STRATA_NOT_FOUND &&
        err.code != STRATA_INVALID_ARGUMENT)
        abort();
    strata_buffer_free(&out);
    return 0;
}
