/* sigsafe_out.h: the one async-signal-safe output buffer of profdev's C
 * runtimes (crates/coverage/c/covrt.c's reports, crates/mprof/c/mprof.c's
 * reports), which may be written from a signal handler: only write(2),
 * memcpy, strlen and arithmetic, no stdio, no allocation.
 *
 * profdev-cbuild puts this header on the include path of every shared
 * object it builds (crates/cbuild/src/lib.rs).
 *
 *     static char buf[8192];
 *     struct sigsafe_out o = SIGSAFE_OUT(fd, buf);
 *     sigsafe_puts(&o, "pid ");
 *     sigsafe_putu(&o, getpid(), 10);
 *     sigsafe_put(&o, "\n", 1);
 *     sigsafe_flush(&o);
 */
#ifndef PROFDEV_SIGSAFE_OUT_H
#define PROFDEV_SIGSAFE_OUT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Bytes held for `fd` in `buf` (of `cap` bytes), written when full and
 * by sigsafe_flush. */
struct sigsafe_out {
    int fd;
    size_t n;
    size_t cap;
    char *buf;
};

/* A buffer writing to `fd` through the array `array`. */
#define SIGSAFE_OUT(fd, array) ((struct sigsafe_out){(fd), 0, sizeof(array), (array)})

/* Write what is held (again after EINTR or a short write; given up at an
 * error or when nothing is written), and hold nothing. */
static inline void sigsafe_flush(struct sigsafe_out *o)
{
    size_t off = 0;
    while (off < o->n) {
        ssize_t k = write(o->fd, o->buf + off, o->n - off);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            break;
        }
        off += (size_t)k;
    }
    o->n = 0;
}

/* Append `n` bytes of `s` (what is held is written first when they do not
 * fit; more than the buffer holds is cut to its size). */
static inline void sigsafe_put(struct sigsafe_out *o, const char *s, size_t n)
{
    if (o->n + n > o->cap)
        sigsafe_flush(o);
    if (n > o->cap)
        n = o->cap;
    memcpy(o->buf + o->n, s, n);
    o->n += n;
}

/* Append the string `s`. */
static inline void sigsafe_puts(struct sigsafe_out *o, const char *s)
{
    sigsafe_put(o, s, strlen(s));
}

/* Append `v` in base `base` (2 to 16; lowercase digits, no prefix): as
 * printf's %lu for 10, %lx for 16. */
static inline void sigsafe_putu(struct sigsafe_out *o, uint64_t v, unsigned base)
{
    char t[64];
    size_t i = sizeof t;
    do {
        t[--i] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    sigsafe_put(o, t + i, sizeof t - i);
}

/* Append `v` in decimal, with a '-' when negative (as printf's %ld). */
static inline void sigsafe_puti(struct sigsafe_out *o, int64_t v)
{
    if (v < 0) {
        sigsafe_put(o, "-", 1);
        sigsafe_putu(o, -(uint64_t)v, 10);
    } else
        sigsafe_putu(o, (uint64_t)v, 10);
}

#endif
