/*
 * profdev_profil.h - profil(2) with the NEWS-os/SVR4 semantics, monitor(3C),
 * and monstartup/moncontrol/_mcleanup writing a GNU gmon.out.
 *
 * Link libprofdev_profil.a (or -lprofdev_profil) before libc: the classic
 * names then replace glibc's. The profdev_ names are always this library's.
 *
 * Static link:  cc prog.c libprofdev_profil.a -lpthread -ldl -lm -o prog
 * Shared link:  cc prog.c -L<dir> -lprofdev_profil -Wl,-rpath,<dir> -o prog
 */
#ifndef PROFDEV_PROFIL_H
#define PROFDEV_PROFIL_H

#include <stddef.h>

/* None of these functions throws; say so as glibc's declarations do, so
 * that C++ accepts this header together with <unistd.h> and <sys/gmon.h>. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define PROFDEV_NOTHROW noexcept(true)
#elif defined(__cplusplus)
#define PROFDEV_NOTHROW throw()
#else
#define PROFDEV_NOTHROW
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * profil(2): every tick of process CPU time (100 Hz, or $PROFDEV_PROFIL_HZ),
 * the interrupted pc adds 1 to buf[((pc - offset) * (scale & 0xFFFE)) >> 17]
 * if that cell is below bufsiz/2 (bufsiz in bytes) and pc >= offset.
 * scale 0 or 1 (or buf NULL) turns profiling off; a later call replaces an
 * earlier one; profiling survives fork in parent and child, stops at exec,
 * and turns itself off if the buffer becomes unwritable.
 * Returns 0, or -1 with errno set if the timer cannot be set up.
 */
int profil(unsigned short *buf, size_t bufsiz, size_t offset, unsigned int scale) PROFDEV_NOTHROW;

/*
 * monitor(3C), SVR4: buffer = 24-byte header, nfunc 16-byte call counters,
 * then the histogram; bufsize counts unsigned shorts. The file is mon.out, or
 * $PROFDIR/<pid>.<program> (no profiling if PROFDIR is set but empty).
 * monitor((int (*)())0, 0, 0, 0, 0) stops and writes it.
 */
void monitor(int (*lowpc)(), int (*highpc)(), unsigned short *buffer, size_t bufsize,
             size_t nfunc) PROFDEV_NOTHROW;

/* BSD/glibc: histogram of lowpc..highpc (4 bytes per bin), profiling on. */
void monstartup(unsigned long lowpc, unsigned long highpc) PROFDEV_NOTHROW;
/* Nonzero: resume profiling into the monstartup histogram; 0: profil(NULL,0,0,0). */
void moncontrol(int mode) PROFDEV_NOTHROW;
/* Stop and write gmon.out (or $GMON_OUT_PREFIX.<pid>) for gprof. */
void _mcleanup(void) PROFDEV_NOTHROW;

/* The same functions under names that never clash with libc's. */
int profdev_profil(unsigned short *buf, size_t bufsiz, size_t offset, unsigned int scale) PROFDEV_NOTHROW;
void profdev_monitor(int (*lowpc)(), int (*highpc)(), unsigned short *buffer, size_t bufsize,
                     size_t nfunc) PROFDEV_NOTHROW;
void profdev_monstartup(unsigned long lowpc, unsigned long highpc) PROFDEV_NOTHROW;
void profdev_moncontrol(int mode) PROFDEV_NOTHROW;
void profdev_mcleanup(void) PROFDEV_NOTHROW;

/* Ticks per second of process CPU time. */
unsigned int profdev_profil_hz(void) PROFDEV_NOTHROW;

#ifdef __cplusplus
}
#endif

#endif /* PROFDEV_PROFIL_H */
