"""Berkeley-style sizes of 32-bit ELF files without binutils: text (allocated, read-only: code and
constants, in flash), data (allocated, writable, with contents: flash and RAM), bss (allocated, no
contents: RAM), with the .stack reserve apart. Usage: python elfsize.py FILE.elf..."""
import struct
import sys

SHF_WRITE, SHF_ALLOC, SHT_NOBITS = 0x1, 0x2, 8


def sizes(path: str) -> dict:
    """{"text", "data", "bss", "stack"} byte counts of one ELF32 little-endian file."""
    with open(path, "rb") as f:
        elf = f.read()
    if elf[:4] != b"\x7fELF" or elf[4] != 1 or elf[5] != 1:
        raise ValueError(f"{path}: not a 32-bit little-endian ELF")
    shoff, = struct.unpack_from("<I", elf, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x2E)
    headers = [struct.unpack_from("<IIIIIIIIII", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = dict(text=0, data=0, bss=0, stack=0)
    for name_off, kind, flags, _, _, size, *_ in headers:
        if not flags & SHF_ALLOC:
            continue
        name = elf[names_at + name_off:elf.index(b"\0", names_at + name_off)].decode()
        key = "stack" if name == ".stack" else "bss" if kind == SHT_NOBITS else "data" if flags & SHF_WRITE else "text"
        out[key] += size
    return out


if __name__ == "__main__":
    print(f"{'text':>8} {'data':>8} {'bss':>8} {'stack':>8}  {'flash':>8} {'ram':>8}  file")
    for p in sys.argv[1:]:
        s = sizes(p)
        print(f"{s['text']:>8} {s['data']:>8} {s['bss']:>8} {s['stack']:>8}  {s['text'] + s['data']:>8} "
              f"{s['data'] + s['bss'] + s['stack']:>8}  {p}")
