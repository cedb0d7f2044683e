/*
 * Running a third-party parser on an untrusted file in a child process (the CBF reader, the HDF5
 * structure walk): the child computes a message and
 * writes it down a pipe, the parent reads it within a time limit and checks it on arrival. A crash,
 * a hang, an allocation beyond the child's memory limit, or a message larger than allowed becomes
 * a failure with a reason instead of the end of the caller's process.
 */
#ifndef SW_IO_ISOLATE_H
#define SW_IO_ISOLATE_H

#include <stddef.h>
#include <stdint.h>

/* The child's work: fills *msg (malloc'ed) and *size; returns 0, or non-zero when out of memory.
 * It runs with stderr sent to a temporary file (what a library prints there comes back in
 * sw_isolated.stderr_tail) and with SIGSEGV, SIGBUS, SIGABRT... at their default actions. */
typedef int (*sw_isolated_fn)(void *arg, uint8_t **msg, size_t *size);

typedef struct sw_isolated {
    uint8_t *msg; /* the child's message (malloc'ed; the caller frees), NULL on failure */
    size_t size;
    int in_process;        /* 1: fork failed and fn ran here (a crash would have ended us)  */
    int exit_code;         /* the child's exit code when it exited, -1 otherwise             */
    char why[192];         /* on failure: what went wrong (crash signal, time limit, ...)    */
    char stderr_tail[256]; /* the last line the child printed on stderr, "" when none        */
} sw_isolated;

/*
 * Runs fn(arg) in a forked child whose data segment may grow by at most extra_memory bytes, and
 * collects its message (at most max_size bytes) within timeout_s seconds. Returns 0 with r->msg
 * set, or -1 with r->why said (r->msg NULL); -2: out of memory in the parent. When fork or pipe
 * fails, fn runs in this process (r->in_process = 1).
 */
int sw_isolated_run(sw_isolated_fn fn, void *arg, double timeout_s, size_t extra_memory,
                    size_t max_size, sw_isolated *r);

#endif /* SW_IO_ISOLATE_H */
