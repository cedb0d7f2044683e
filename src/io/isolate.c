/*
 * A parser run in a child process (isolate.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "io/isolate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int write_all(int fd, const uint8_t *buf, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, buf, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The data segment's size so far (VmData, bytes), or 0 when unknown. */
static rlim_t data_size_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmData: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (rlim_t)kb * 1024;
}

/* The last non-empty line of the file open on fd (from its start), into out. */
static void last_line(int fd, char *out, size_t size)
{
    out[0] = '\0';
    off_t end = lseek(fd, 0, SEEK_END);
    if (end <= 0)
        return;
    char buf[1024];
    off_t from = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    char *s = strrchr(buf, '\n');
    s = s ? s + 1 : buf;
    size_t k = 0;
    for (; *s && k + 1 < size; s++) /* printable ASCII only: it goes into messages */
        out[k++] = (*s >= 0x20 && *s < 0x7F) ? *s : '?';
    out[k] = '\0';
}

/* Sanitizer builds: the runtime's hook run before a report ends the process (libFuzzer sets one
 * that saves the current input as a crash). Weak: NULL in plain builds. */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void child(int fd, int errfd, sw_isolated_fn fn, void *arg, size_t extra_memory)
{
    /* A memory error the sanitizer catches in the third-party code (CBFlib frees what it
     * overflowed) ends this child with its report on the captured stderr and exit 1, a failure
     * the parent reports; a fuzzer's death hook inherited from the parent would instead save
     * the input as a crash of the parent's. */
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(NULL);
    rlim_t now = data_size_now();
    struct rlimit rl;
    if (now > 0 && getrlimit(RLIMIT_DATA, &rl) == 0 &&
        (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > now + extra_memory)) {
        rl.rlim_cur = now + extra_memory;
        setrlimit(RLIMIT_DATA, &rl);
    }
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGPIPE};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    if (errfd >= 0)
        dup2(errfd, STDERR_FILENO);
    uint8_t *m = NULL;
    size_t n = 0;
    int rc = fn(arg, &m, &n) != 0 || !m ? 3 : write_all(fd, m, n) < 0 ? 4 : 0;
    _exit(rc);
}

int sw_isolated_run(sw_isolated_fn fn, void *arg, double timeout_s, size_t extra_memory,
                    size_t max_size, sw_isolated *r)
{
    memset(r, 0, sizeof *r);
    r->exit_code = -1;
    int fds[2] = {-1, -1};
    pid_t pid = -1;
    FILE *err = tmpfile(); /* the child's stderr, read back for the reason it gives */
    if (pipe(fds) == 0) {
        fcntl(fds[0], F_SETFD, FD_CLOEXEC);
        fcntl(fds[1], F_SETFD, FD_CLOEXEC);
        fflush(NULL); /* nothing buffered here may be written twice */
        pid = fork();
        if (pid == 0) {
            close(fds[0]);
            child(fds[1], err ? fileno(err) : -1, fn, arg, extra_memory);
        }
        close(fds[1]);
        if (pid < 0)
            close(fds[0]);
    }
    if (pid < 0) {
        if (err)
            fclose(err);
        r->in_process = 1;
        if (fn(arg, &r->msg, &r->size) != 0 || !r->msg) {
            free(r->msg);
            r->msg = NULL;
            return -2;
        }
        return 0;
    }
    size_t cap = 0, size = 0;
    uint8_t *msg = NULL;
    int timed_out = 0, too_big = 0, oom = 0;
    const double end = now_s() + timeout_s;
    for (;;) {
        double left = end - now_s();
        if (left <= 0.0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int pr = poll(&p, 1, left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            break;
        if (pr == 0)
            continue;
        if (size == cap) {
            if (cap >= max_size) {
                too_big = 1;
                break;
            }
            size_t nc = cap ? 2 * cap : 65536;
            if (nc > max_size)
                nc = max_size;
            uint8_t *m = realloc(msg, nc);
            if (!m) {
                oom = 1;
                break;
            }
            msg = m;
            cap = nc;
        }
        ssize_t k = read(fds[0], msg + size, cap - size);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        size += (size_t)k;
    }
    close(fds[0]);
    if (timed_out || too_big || oom)
        kill(pid, SIGKILL);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    r->exit_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    if (err) {
        last_line(fileno(err), r->stderr_tail, sizeof r->stderr_tail);
        fclose(err);
    }
    if (oom) {
        free(msg);
        return -2;
    }
    if (timed_out)
        snprintf(r->why, sizeof r->why, "reading it took more than %g s", timeout_s);
    else if (too_big)
        snprintf(r->why, sizeof r->why, "it holds more than %zu bytes of data", max_size);
    else if (WIFSIGNALED(ws))
        snprintf(r->why, sizeof r->why, "the reader crashed on it (signal %d)", WTERMSIG(ws));
    else if (!WIFEXITED(ws) || WEXITSTATUS(ws) == 3)
        snprintf(r->why, sizeof r->why, "the reader ran out of memory");
    else if (WEXITSTATUS(ws) != 0)
        snprintf(r->why, sizeof r->why, "the reader failed (exit %d)", WEXITSTATUS(ws));
    if (r->why[0]) {
        free(msg);
        return -1;
    }
    r->msg = msg;
    r->size = size;
    return 0;
}
