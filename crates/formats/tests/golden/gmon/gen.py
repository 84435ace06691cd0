#!/usr/bin/env python3
"""Reference generator for the gmon.out test vectors TV-G1..TV-G4 (spec §3.8).

Writes tv-g1.gnu.gmon, tv-g2.bsd.gmon, tv-g3.oldbsd.gmon, tv-g4.bsd.gmon into the
current directory. The first three are the spec's generator verbatim; TV-G4 follows
the spec's prose (4-byte bins, profrate 1000, no arcs).
"""
import struct

LO, HI = 0x401000, 0x401300
nb = (HI - LO) // 2
bins = [0] * nb
for addr, n in [(0x4011b0, 60), (0x4011c0, 20), (0x4011e0, 15), (0x401210, 5)]:
    bins[(addr - LO) // 2] += n
arcs = [(0x4011f0, 0x4011a6, 2000), (0x401210, 0x4011da, 200), (0x401220, 0x4011a6, 1)]
H = struct.pack('<%dH' % nb, *bins)
gnu = (b'gmon' + struct.pack('<I', 1) + bytes(12) + b'\x00' + struct.pack('<QQII', LO, HI, nb, 100)
       + b'seconds'.ljust(15, b'\x00') + b's' + H
       + b''.join(b'\x01' + struct.pack('<QQI', *a) for a in arcs))
bsd44 = (struct.pack('<QQiii3i', LO, HI, 40 + 2 * nb, 0x00051879, 100, 0, 0, 0) + H
         + b''.join(struct.pack('<QQq', *a) for a in arcs))
oldbsd = struct.pack('<QQi', LO, HI, 20 + 2 * nb) + H + b''.join(struct.pack('<QQq', *a) for a in arcs)

nb4 = (HI - LO) // 4
b4 = [0] * nb4
b4[(0x4011b0 - LO) // 4] += 30
b4[(0x4011d8 - LO) // 4] += 10
g4 = struct.pack('<QQiii3i', LO, HI, 40 + 2 * nb4, 0x00051879, 1000, 0, 0, 0) + struct.pack('<%dH' % nb4, *b4)

for name, data in [('tv-g1.gnu.gmon', gnu), ('tv-g2.bsd.gmon', bsd44),
                   ('tv-g3.oldbsd.gmon', oldbsd), ('tv-g4.bsd.gmon', g4)]:
    with open(name, 'wb') as f:
        f.write(data)
