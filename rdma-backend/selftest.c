/*
 * Self-test of the native core in one process, meant to run under AddressSanitizer/LeakSanitizer
 * (tests/test_fabric_native.py builds it with -fsanitize=address):
 *
 *   selftest PROVIDER
 *
 * Three rounds of: open, write 20 MiB to itself (round 1 in 4 KiB chunks: -FI_EAGAIN), send a
 * control message to itself, check the bytes, close (round 2 leaves MRs for sqf_close). Prints one
 * "ok" line per round; exits non-zero on any failure. A leak makes LeakSanitizer fail the exit.
 */
#include "squall_fabric.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                                           \
    do {                                                                                                   \
        int rc_ = (x);                                                                                     \
        if (rc_ < 0) {                                                                                     \
            fprintf(stderr, "FAIL %s: %d %s\n", #x, rc_, sqf_last_error(ep));                               \
            return 1;                                                                                      \
        }                                                                                                  \
    } while (0)

static int round_trip(const char *provider, int round)
{
    sqf_ep *ep = NULL;
    char err[256];
    if (sqf_open(provider, &ep, err, sizeof err)) {
        fprintf(stderr, "FAIL open: %s\n", err);
        return 1;
    }
    char name[256];
    size_t len = sizeof name;
    uint64_t self;
    CHECK(sqf_getname(ep, name, &len));
    CHECK(sqf_av_insert(ep, name, &self));

    size_t n = 20u << 20;
    char *src = malloc(n), *dst = calloc(1, n);
    if (!src || !dst)
        return 1;
    for (size_t i = 0; i < n; i++)
        src[i] = (char)(i * 7 + round);
    sqf_mr *ms, *md, *extra;
    CHECK(sqf_mr_reg(ep, src, n, 0, &ms));
    CHECK(sqf_mr_reg(ep, dst, n, 1, &md));
    CHECK(sqf_mr_reg(ep, dst, 4096, 1, &extra));
    CHECK(sqf_set_chunk_size(ep, round == 1 ? 4096 : 0));
    CHECK(sqf_write(ep, ms, 0, n, self, sqf_mr_remote_base(md), sqf_mr_key(md), 42, 60000));
    CHECK(sqf_send(ep, self, "hello", 5, 7, 60000));

    sqf_event ev[16];
    int wrote = 0, sent = 0, got = 0;
    for (int polls = 0; !(wrote && sent && got); polls++) {
        if (polls > 600) {
            fprintf(stderr, "FAIL: no completion after 60 s\n");
            return 1;
        }
        int k = sqf_poll(ep, ev, 16, 100);
        CHECK(k);
        for (int i = 0; i < k; i++) {
            if (ev[i].kind == SQF_EV_WRITE)
                wrote = ev[i].tag == 42 && ev[i].err == 0 && ev[i].len == n;
            if (ev[i].kind == SQF_EV_SEND)
                sent = ev[i].tag == 7 && ev[i].err == 0;
            if (ev[i].kind == SQF_EV_RECV)
                got = ev[i].len == 5 && memcmp(ev[i].data, "hello", 5) == 0;
        }
    }
    sqf_info info;
    CHECK(sqf_get_info(ep, &info));
    int same = memcmp(src, dst, n) == 0;
    printf("%s round %d %s eagain=%llu pending=%d\n", info.provider, round, same ? "ok" : "MISMATCH",
           (unsigned long long)info.eagain, sqf_pending(ep));
    CHECK(sqf_mr_close(ms));
    if (round != 2) {
        CHECK(sqf_mr_close(md));
        CHECK(sqf_mr_close(extra));
    }
    CHECK(sqf_close(ep, 1000));
    free(src);
    free(dst);
    return same ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *provider = argc > 1 ? argv[1] : NULL;
    for (int round = 0; round < 3; round++)
        if (round_trip(provider, round))
            return 1;
    return 0;
}
