# tests/fuzz/jpeg_splice_seeds.py - writes the seeds of fuzz_jpeg_splice (corpus/jpeg_splice):
#   cd tests/fuzz/corpus/jpeg_splice && python3 ../../jpeg_splice_seeds.py
# cjpeg (libjpeg-turbo 2.1.5) makes the JPEGs; each seed is the 12-byte head, then the stream or tile.
import struct, subprocess, math
def ppm(w, h, seed):
    s = seed; px = bytearray()
    for y in range(h):
        for x in range(w):
            s = (s * 1103515245 + 12345) & 0x7fffffff
            n = (s >> 16) & 31
            px += bytes(((x * 9 + n) & 255, (int(128 + 100 * math.sin((x + y) / 3.0)) + n) & 255,
                         (255 if (x // 5 + y // 7) % 2 else 0) ^ n))
    return b"P6\n%d %d\n255\n" % (w, h) + bytes(px)
def head(x, y, w, h, flags, pick=0, sw=0, sh=0):
    return struct.pack("<HHHHBBBB", x, y, w, h, flags, pick, sw, sh)
def jpeg(w, h, seed, args):
    return subprocess.run(["cjpeg", "-quality", "75"] + args, input=ppm(w, h, seed),
                          capture_output=True, check=True).stdout
seeds = {
    "rst-420-1mcu": (head(17, 20, 5, 3, 0x08), jpeg(48, 40, 1, ["-sample", "2x2", "-restart", "1B"])),
    "rst-444-2mcu-region": (head(30, 9, 9, 14, 0x1f), jpeg(40, 24, 2, ["-sample", "1x1", "-restart", "2B"])),
    "rst-422-1row": (head(3, 17, 60, 9, 0x0a), jpeg(64, 32, 3, ["-sample", "2x1", "-restart", "1"])),
    "rst-gray-3mcu": (head(12, 9, 8, 8, 0x03), jpeg(48, 20, 4, ["-grayscale", "-restart", "3B"])),
    "rst-411-1mcu": (head(40, 8, 30, 9, 0x0b), jpeg(70, 17, 5, ["-sample", "4x1", "-restart", "1B"])),
    "rst-440-2rows": (head(0, 33, 5, 2, 0x0f), jpeg(24, 50, 6, ["-sample", "1x2", "-restart", "2"])),
    "rst-420-odd-2mcu": (head(20, 20, 1, 1, 0x08), jpeg(37, 29, 7, ["-sample", "2x2", "-restart", "2B"])),
    "progressive-rst": (head(10, 10, 4, 4, 0x08), jpeg(32, 32, 8, ["-progressive", "-restart", "1B"])),
    "synth-420-1mcu": (head(100, 70, 40, 30, 0x28, 2 + 9 * 0, 172, 130), b"\x10\x80\xf0\x33\x99"),
    "synth-444-2mcu": (head(5, 60, 200, 3, 0x3f, 0 + 9 * 1, 191, 95), b"\x01\x02\x03\xfe\xfd"),
    "synth-411-3mcu": (head(90, 2, 7, 7, 0x2b, 4 + 9 * 2, 199, 71), b"\x77\x10\x00"),
    "synth-gray-2rows": (head(0, 40, 30, 10, 0x29, 5 + 9 * 4, 60, 90), b"\xa0\x05"),
    "synth-440-1row": (head(31, 17, 2, 2, 0x39, 3 + 9 * 3, 63, 63), b"\x42"),
    "synth-422-1x1": (head(0, 0, 1, 1, 0x28, 1, 0, 0), b"\x20\x40\x60"),
    "synth-finer-chroma-1mcu": (head(50, 50, 20, 20, 0x2c, 6 + 9 * 0, 120, 100), b"\x05\xf0\x77"),
    "synth-luma3-2mcu": (head(48, 8, 1, 30, 0x38, 7 + 9 * 1, 143, 40), b"\x99\x11"),
    "synth-all2x1-1row": (head(16, 16, 16, 16, 0x2e, 8 + 9 * 3, 64, 64), b"\x31\x41\x59"),
}
for name, (h, body) in seeds.items():
    open(name, "wb").write(h + body)
