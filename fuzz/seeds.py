#!/usr/bin/env python3
"""Write the synthetic seed corpus of the fuzz targets (fuzz/README.md).

    python3 fuzz/seeds.py            # from the repository root

Deterministic: running it again rewrites the same bytes. The unwind seeds
(stacks copied by gdb) and the elf seed (a built program) have recipes of
their own in fuzz/README.md; gmon's seeds are the golden files of
crates/formats/tests/golden/gmon.
"""
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# kpdata: Inferno 4e, big-endian u32 words; header words 0-5.
def kpdata(buckets, total, outside, log_bucket=3):
    words = [total, outside, 1000, 6 + len(buckets), 4, log_bucket] + buckets
    return struct.pack(">%dI" % len(words), *words)


put("kpdata", "ten-buckets", kpdata([0, 5, 0, 0, 7, 0, 0, 0, 1, 2], 17, 2))
put("kpdata", "empty", kpdata([], 0, 0))
put("kpdata", "short", kpdata([1, 2, 3], 6, 0)[:10])
# The header alone decides (kprof reads no further when the total is 0):
# no ticks with a shift out of range and a trailing partial word; ticks
# with a header cut inside word 4; 1-byte buckets.
put("kpdata", "zero-total-bad-shift", kpdata([9, 9], 0, 3, 40) + b"\x01\x02")
put("kpdata", "cut-header", kpdata([], 5, 0)[:18])
put("kpdata", "byte-buckets", kpdata([0, 1, 2, 3], 6, 0, 0))

# kallsyms / System.map text.
put("kallsyms", "kallsyms",
    b"ffffffff81000000 T _stext\nffffffff81000000 T _text\n"
    b"ffffffff81001000 T start_kernel\nffffffff81001200 t helper\n"
    b"ffffffff81002000 W weak_fn\nffffffff81003000 T _etext\n"
    b"ffffffffc0000000 t mod_fn\t[xfs]\n")
put("kallsyms", "system-map",
    b"ffffffff81000000 T _stext\nffffffff81000400 T do_one\n"
    b"ffffffff81000800 D some_data\nffffffff81001000 T _etext\n")

# /proc/PID/maps text: a process's ordinary lines, then odd ones (a
# deleted file, spaces in a path, the vDSO, a huge inode, a non-UTF-8
# name, a truncated line, garbage).
put("maps", "process",
    b"55d0c1a00000-55d0c1a02000 r--p 00000000 08:01 1311                       /usr/bin/cat\n"
    b"55d0c1a02000-55d0c1a07000 r-xp 00002000 08:01 1311                       /usr/bin/cat\n"
    b"55d0c2b3c000-55d0c2b5d000 rw-p 00000000 00:00 0                          [heap]\n"
    b"7f1c2a400000-7f1c2a428000 r--p 00000000 08:01 1835029                    "
    b"/usr/lib/x86_64-linux-gnu/libc.so.6\n"
    b"7f1c2a5f0000-7f1c2a5fd000 rw-p 00000000 00:00 0 \n"
    b"7ffd4a5d3000-7ffd4a5f4000 rw-p 00000000 00:00 0                          [stack]\n"
    b"7ffd4a5f3000-7ffd4a5f5000 r-xp 00000000 00:00 0                          [vdso]\n"
    b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n")
put("maps", "odd",
    b"7f00-7f10 r-xp 00001000 fd:1a 42   /tmp/a dir/lib x.so (deleted)\n"
    b"7f10-7f20 rw-s 00000000 00:1a3 7 /dev/shm/x  \n"
    b"7f20-7f30 r--p ffffffffffffffff ffffffff:ffffffff 18446744073709551615 /x\n"
    b"7f30-7f40 r--p 0 08:01 18446744073709551616 /toobig\n"
    b"7f40-7f50 r-xp 0 08:01 43 /tmp/\xff\xfe.so\r\n"
    b"7f50-7f60 r-xp 0 08:01 44 /tmp/a\\012b\n"
    b"7f60-7f70 r-xp\n"
    b"zz-7f10 r-xp 0 08:01 42 /x\n"
    b"garbage")

# ctl messages.
for name, msg in [("start", b"start\n"), ("module", b"module libc.so.6 /bin/true\n"),
                  ("interval", b"interval 10\n"), ("bad", b"stopwatch\n"),
                  ("args", b"start now\r\n")]:
    put("ctl", name, msg)

# prof histogram text.
put("prof_histogram", "pairs", b"0x1139 5\n0x1140 2\n0x2000 18446744073709551615\n")
put("prof_histogram", "inferno", b"12 5")
put("prof_histogram", "unordered", b"0x20 1\n0x10 1\n")


# prf logs: profdev's layout (PRFLOG64) and SVR4's.
def prf64(addrs, extra, records, cut=0):
    out = b"PRFLOG64" + struct.pack("<IIQ", 1, extra, len(addrs))
    out += struct.pack("<%dQ" % len(addrs), *addrs)
    for t, counters in records:
        out += struct.pack("<q", t) + struct.pack("<%dQ" % len(counters), *counters)
    return out[:len(out) - cut]


def prf32(addrs, records):
    out = struct.pack("<i", len(addrs)) + struct.pack("<%dI" % len(addrs), *addrs)
    for t, counters in records:
        out += struct.pack("<i", t) + struct.pack("<%dI" % len(counters), *counters)
    return out


addrs = [0, 0xffffffff81000000, 0xffffffff81001000]
put("prflog", "profdev64", prf64(addrs, 2, [(0, [0] * 5), (1700000000, [1, 20, 30, 4, 5])]))
put("prflog", "profdev64-torn", prf64(addrs, 2, [(0, [0] * 5), (1700000000, [1, 2, 3, 4, 5])], cut=13))
put("prflog", "svr4", prf32([0, 0xc0001000], [(0, [0, 0, 0]), (600000000, [3, 9, 1])]))

# perf rings. A record: header (type u32, misc u16, size u16) + body.
SAMPLE, MMAP, LOST, COMM, EXIT, THROTTLE, FORK, MMAP2 = 9, 1, 2, 3, 4, 5, 7, 10
KERNEL, USER = 1, 2


def rec(ty, misc, body):
    return struct.pack("<IHH", ty, misc, 8 + len(body)) + body


def trailer(pid, tid, time, cpu):
    return struct.pack("<IIQII", pid, tid, time, cpu, 0)


def pad(s):
    b = s.encode() + b"\0"
    return b + b"\0" * (-len(b) % 8)


def sample(ip, pid, time, cpu, misc, chain=None, regs=None, stack=None):
    body = struct.pack("<QIIQIIQ", ip, pid, pid, time, cpu, 0, 1000000)
    if chain is not None:
        body += struct.pack("<Q", len(chain)) + struct.pack("<%dQ" % len(chain), *chain)
    if regs is not None:
        body += struct.pack("<QQQQ", 2, *regs)
        body += struct.pack("<Q", len(stack)) + stack + struct.pack("<Q", len(stack))
    return rec(SAMPLE, misc, body)


def ring_input(flags, log2, tail, records):
    data = b"".join(records)
    size = 1 << log2
    ring = bytearray(size)
    for i, b in enumerate(data):
        ring[(tail + i) % size] = b
    return bytes([flags, log2 - 3]) + struct.pack("<QI", tail, len(data)) + bytes(ring)


plain = [
    rec(COMM, 0x2000, struct.pack("<II", 42, 42) + pad("true") + trailer(42, 42, 1, 0)),
    rec(MMAP2, USER, struct.pack("<IIQQQIIQQII", 42, 42, 0x400000, 0x1000, 0, 8, 1, 1234, 0, 5, 2)
        + pad("/bin/true") + trailer(42, 42, 2, 0)),
    rec(MMAP, USER, struct.pack("<IIQQQ", 42, 42, 0x7f0000000000, 0x2000, 0x1000)
        + pad("/lib/libc.so.6") + trailer(42, 42, 3, 0)),
    sample(0xffffffff81001234, 42, 4, 0, KERNEL),
    sample(0x401020, 42, 5, 1, USER),
    rec(FORK, 0, struct.pack("<IIIIQ", 43, 42, 43, 42, 6) + trailer(43, 43, 6, 0)),
    rec(EXIT, 0, struct.pack("<IIIIQ", 43, 42, 43, 42, 7) + trailer(43, 43, 7, 0)),
    rec(LOST, 0, struct.pack("<QQ", 1, 3) + trailer(0, 0, 8, 0)),
    rec(THROTTLE, 0, struct.pack("<QQQ", 9, 1, 1) + trailer(0, 0, 9, 0)),
]
put("perf_ring", "plain", ring_input(0, 10, 0, plain))
put("perf_ring", "wrapped", ring_input(0, 9, 5 * 512 + 400, plain))
chain = [0xffffffffffffff80, 0xffffffff81001234, 0xffffffff81000500,
         0xfffffffffffffe00, 0x401020, 0x401100]
put("perf_ring", "callchain", ring_input(1, 9, 0, [sample(0xffffffff81001234, 42, 4, 0, KERNEL, chain)]))
stack = struct.pack("<8Q", 0, 0x40109f, 0x7ffc0000, 0x4010e0, 0, 0, 0x40100e, 0)
put("perf_ring", "user-stack", ring_input(2, 9, 8, [
    sample(0x401030, 42, 4, 0, USER, None, (0x7ffc0000, 0x7ffbff00, 0x401030), stack)]))

# elf: the unwinder fixture's small sibling (fuzz/README.md), if built.
elf = os.path.join(ROOT, "crates", "symbolize", "fuzz-fixture", "fx.elf")
if os.path.exists(elf):
    with open(elf, "rb") as f:
        head = f.read(1024)
    put("elf", "fx-first-1k", head)

# gmon: the golden files.
# prf: cprof's .prf records (profdev_coverage::prf).
put("prf", "valid", b"profdev-prf 1 ab01 /usr/lib/x86_64-linux-gnu/libc.so.6\n16 3\n18 3\n20 0\nb 18 3 0\n")
put("prf", "no-build-id", b"profdev-prf 1 - /bin/with a blank\n4198662 10\n4198669 0\n")
put("prf", "not-ascending", b"profdev-prf 1 - /x\n5 1\n5 1\n")
put("prf", "inferno-no-header", b"4198662 10\n")

g = os.path.join(ROOT, "crates", "formats", "tests", "golden", "gmon")
for name in sorted(os.listdir(g)):
    if name.endswith(".gmon"):
        os.makedirs(os.path.join(CORPUS, "gmon"), exist_ok=True)
        shutil.copyfile(os.path.join(g, name), os.path.join(CORPUS, "gmon", name))

# coverage_cache: the coverage engine's on-disk cache (profdev_coverage::cache),
# version 5: magic line, 32-byte key, a header (the plan's blocks, its
# counters, its area's size for plain counting code), the plan prefixed
# by its length in bytes (its blocks' instructions as one buffer, then the
# blocks), then the encoding; unsigned LEB128 numbers (v),
# addresses as zigzag differences from the one before (d), and
# length-prefixed sequences; one plan of two blocks (a jump-counted one
# ending in a conditional jump, its flags live, one derived from its
# fall-through), one jump whose table was recovered (Plan::tables), the
# plan's mode (0: counts, 1: hits, 2: edges), one range of code the module copies at
# run time (Plan::copied), no derived block (Plan::derived), no edges
# (Plan::edges), and an
# encoding (movable, with the offsets of its fields that reach the module;
# its patches as the 12-byte records a load is sent: u32 address, u32
# entry less the area's offset, u16 kind, u16 length, little-endian).
def leb(x):
    out = b""
    while x >= 0x80:
        out += bytes([(x & 0x7F) | 0x80])
        x >>= 7
    return out + bytes([x])


def cache_file(with_encoding=True, cut=0):
    v = lambda *xs: b"".join(leb(x) for x in xs)

    def d(x, base):
        s = (x - base) % 2**64
        s = s - 2**64 if s >= 2**63 else s
        return leb(((s << 1) ^ (s >> 63)) % 2**64)

    b = v(2)
    # The blocks' instructions, one buffer of bytes (0): per block its
    # first address whole (8 bytes), then a byte per later instruction,
    # its distance from the one before; then each block's length in it.
    insns = struct.pack("<Q", 0x1000) + bytes([4]) + struct.pack("<Q", 0x1008)
    b += b"\x00" + v(len(insns)) + insns + v(9, 8)
    # start, end; kind 1 (Jmp) | live 0x10 | branch 0x20; from, to,
    # overwrite; its branch.
    b += d(0x1000, 0) + d(0x1008, 0x1000)
    b += b"\x31" + d(0x1000, 0x1000) + d(0x1008, 0x1000) + v(5) + v(0)
    # kind 6 (Fell) of branch 0.
    b += d(0x1008, 0x1000) + d(0x100A, 0x1008) + b"\x06" + v(0)
    # One branch, live, falling through to no block of its own.
    b += v(1) + d(0x1006, 0) + v(1)
    b += b"\x01" + v(3) + b"\x01\x02\x03"
    b += v(1, 0x1000, 16) + b"\x90" * 16
    b += v(1) + d(0x1004, 0)
    b += b"\x00"  # the plan's mode: counts
    b += v(1, 0x1008) + d(0x1010, 0x1008)  # code copied at run time (Plan::copied)
    b += v(0)  # blocks derived from the edges into them (Plan::derived): none
    b += v(0)  # where each branch's edges are read from (Plan::edges, mode 2): none
    # The header: 2 blocks, 3 counters (the blocks and the branch), an area
    # of 8192 bytes (a page, and 96 + 5 * 8 + 48 for the jump-counted
    # block, rounded up to pages).
    b = b"profdev-coverage-cache 5\n" + bytes(range(32)) + v(2, 3, 8192) + v(len(b)) + b
    if with_encoding:
        b += b"\x01" + v(0x6000, 64) + b"\xcc" * 64
        b += v(1) + struct.pack("<IIHH", 0x1000, 0x7000 - 0x6000, 1, 5)
        b += v(0, 0, 0, 2) + d(3, 0) + d(20, 3) + v(7)
        b += b"\x01" + v(2) + d(9, 0) + d(40, 9)  # movable; fields reaching the module
    else:
        b += b"\x00"
    return b[:len(b) - cut]


put("coverage_cache", "valid", cache_file())
put("coverage_cache", "plan-only", cache_file(with_encoding=False))
put("coverage_cache", "cut", cache_file(cut=9))


# heap_scan (profdev_mprof::fuzzing::heap_scan): 8 words (main_arena's
# top, fastbin 1's head, arena next, an mmapped chunk's header, a stack
# word, the fs base, two registers: offsets into the heap), then the heap:
# a tcache_perthread_struct, a block the stack holds, a fastbin chunk, a
# block a register points into, the top chunk.
def heap_scan(corrupt=False):
    heap_base = 0x5555_0000_0000
    heap = bytearray(0x2000)

    def chunk(at, size):
        struct.pack_into("<Q", heap, at + 8, size)

    chunk(0, 0x291)
    chunk(0x290, 0x61)
    chunk(0x2f0, 0x31)
    struct.pack_into("<Q", heap, 0x300, (heap_base + 0x300) >> 12)
    chunk(0x320, 0x1001 if not corrupt else 0x1009)
    chunk(0x1320, (0x2000 - 0x1320) | 1)
    words = struct.pack("<8Q", 0x1320, 0x2f0, 0, 0x2002, 0x2a0, 0, 0x420, 0)
    return words + bytes(heap)


put("heap_scan", "heap", heap_scan())
put("heap_scan", "corrupt-size", heap_scan(corrupt=True))
put("heap_scan", "zeros", bytes(64))
