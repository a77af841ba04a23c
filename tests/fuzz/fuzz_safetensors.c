/* fuzz_safetensors.c — libFuzzer target for the safetensors header checks:
 * each input is taken as a whole file (8-byte header length, JSON header,
 * data) and run through the same two functions vn_load uses before it
 * touches any tensor data. Sanitizers turn an out-of-bounds read, a leak or
 * undefined behaviour into a crash the fuzzer reports.
 *
 *     CC=clang cmake -S . -B build-fuzz -DVENOM_FUZZ=ON
 *     cmake --build build-fuzz -j2 --target fuzz_safetensors
 *     mkdir -p /tmp/st-corpus
 *     build-fuzz/tests/fuzz_safetensors /tmp/st-corpus tests/fuzz/corpus \
 *         -dict=tests/fuzz/safetensors.dict -max_total_time=60
 *
 * New inputs go to the first directory (not the checked-in seeds). */
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t hlen;
    if (vn__st_header_length(data, size, "fuzz", &hlen) != VN_OK) return 0;
    vn_st_header h;
    if (vn__st_parse_header((const char *)data + 8, (size_t)hlen, size - 8 - hlen, "fuzz", &h) ==
        VN_OK) {
        /* What the loader relies on: sorted ranges inside the data. */
        uint64_t pos = 0;
        for (int i = 0; i < h.n; i++) {
            if (h.entries[i].begin != pos || h.entries[i].end > size - 8 - hlen) __builtin_trap();
            pos = h.entries[i].end;
        }
        vn__st_header_free(&h);
    }
    return 0;
}
