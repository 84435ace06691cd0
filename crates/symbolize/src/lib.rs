//! Kernel (kallsyms, System.map, vmlinux) and user ELF/DWARF symbolization, in process.
