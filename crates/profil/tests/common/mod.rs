//! Shared harness of the integration tests: build the library, compile the C
//! programs under tests/c against glibc or against us, run them, parse what
//! they print and attribute histogram cells to functions via the ELF
//! symbol table.
#![allow(dead_code)] // each test binary uses a different part of the harness

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use object::{Object, ObjectSymbol};
use profdev_profil::index::{Formula, Tick};

pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Where the library and examples of this build are.
pub struct Built {
    /// `<target>/<profile>`: holds libprofdev_profil.{a,so} and examples/.
    pub profile_dir: PathBuf,
}

/// Build the static and shared library and the examples with the profile
/// and target directory of the running test binary (a no-op when fresh).
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        // <target>/<profile>/deps/<test binary>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binary lives in <target>/<profile>/deps")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev".to_string(),
            Some(p) => p.to_string(),
            None => "dev".to_string(),
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "build",
                "-p",
                "profdev-profil",
                "--lib",
                "--examples",
                "--profile",
                &profile,
            ])
            .arg("--manifest-path")
            .arg(Path::new(MANIFEST_DIR).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir)
            .output()
            .expect("run cargo build");
        assert!(
            out.status.success(),
            "cargo build of the library failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for lib in ["libprofdev_profil.a", "libprofdev_profil.so"] {
            assert!(
                profile_dir.join(lib).exists(),
                "{lib} not found in {}",
                profile_dir.display()
            );
        }
        Built { profile_dir }
    })
}

/// Which profil a C program gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// glibc's own (no library linked).
    Glibc,
    /// libprofdev_profil.a in front of libc.
    Static,
    /// -lprofdev_profil in front of libc, with an rpath.
    Shared,
}

/// Compile tests/c/`name`.c into `dir`; returns the executable.
pub fn compile(name: &str, link: Link, dir: &Path) -> PathBuf {
    compile_with(name, link, dir, &[])
}

/// [`compile`] with extra compiler flags.
pub fn compile_with(name: &str, link: Link, dir: &Path, flags: &[&str]) -> PathBuf {
    let src = Path::new(MANIFEST_DIR)
        .join("tests/c")
        .join(format!("{name}.c"));
    let exe = dir.join(format!("{name}-{link:?}").to_lowercase());
    let mut cmd = Command::new("cc");
    cmd.args([
        "-O1",
        "-g",
        "-fno-inline",
        "-fno-omit-frame-pointer",
        "-Wall",
    ])
    .args(flags)
    .arg("-I")
    .arg(Path::new(MANIFEST_DIR).join("include"))
    .arg(&src)
    .arg("-o")
    .arg(&exe);
    match link {
        Link::Glibc => {}
        Link::Static => {
            cmd.arg(built().profile_dir.join("libprofdev_profil.a"));
            cmd.args(["-lpthread", "-ldl", "-lm", "-lgcc_s"]);
        }
        Link::Shared => {
            let d = &built().profile_dir;
            cmd.arg(format!("-L{}", d.display()))
                .arg("-lprofdev_profil")
                .arg(format!("-Wl,-rpath,{}", d.display()));
        }
    }
    cmd.arg("-lpthread");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc ({e}): install gcc (apt-get install gcc)"));
    assert!(
        out.status.success(),
        "cc {name}.c ({link:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Run `exe` with `args` in `cwd`.
pub fn run(exe: &Path, args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("PROFDEV_PROFIL_HZ");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()))
}

/// Run and require exit status 0.
pub fn run_ok(exe: &Path, args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Dump {
    let out = run(exe, args, cwd, env);
    assert!(
        out.status.success(),
        "{} {args:?} failed with {}:\nstdout:\n{}\nstderr:\n{}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Dump::parse(&String::from_utf8_lossy(&out.stdout))
}

/// One profil call as the program reported it.
#[derive(Debug, Clone, Copy)]
pub struct ProfilArgs {
    pub offset: usize,
    pub bufsiz: usize,
    pub scale: u32,
}

/// What a test program printed (see tests/c/common.h).
#[derive(Debug, Default)]
pub struct Dump {
    pub syms: HashMap<String, u64>,
    pub profil: HashMap<String, ProfilArgs>,
    pub cells: HashMap<String, BTreeMap<usize, u64>>,
    pub values: HashMap<String, String>,
    pub text: String,
}

impl Dump {
    pub fn parse(stdout: &str) -> Dump {
        let mut d = Dump {
            text: stdout.to_string(),
            ..Dump::default()
        };
        for line in stdout.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex");
            match w.as_slice() {
                ["sym", name, addr] => {
                    d.syms.insert(name.to_string(), hex(addr));
                }
                ["profil", tag, off, bufsiz, scale] => {
                    d.profil.insert(
                        tag.to_string(),
                        ProfilArgs {
                            offset: hex(off) as usize,
                            bufsiz: bufsiz.parse().unwrap(),
                            scale: scale.parse().unwrap(),
                        },
                    );
                }
                ["cell", tag, i, n] => {
                    *d.cells
                        .entry(tag.to_string())
                        .or_default()
                        .entry(i.parse().unwrap())
                        .or_default() += n.parse::<u64>().unwrap();
                }
                [key, value] => {
                    d.values.insert(key.to_string(), value.to_string());
                }
                _ => {}
            }
        }
        d
    }

    pub fn value(&self, key: &str) -> u64 {
        self.values
            .get(key)
            .unwrap_or_else(|| panic!("no `{key}` line in:\n{}", self.text))
            .parse()
            .unwrap()
    }

    pub fn total(&self, tag: &str) -> u64 {
        self.cells.get(tag).map(|c| c.values().sum()).unwrap_or(0)
    }
}

/// Function symbols of an ELF file: name -> (link-time address, size).
pub fn elf_functions(exe: &Path) -> HashMap<String, (u64, u64)> {
    let data = std::fs::read(exe).expect("read executable");
    let file = object::File::parse(&*data).expect("parse ELF");
    file.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| Some((s.name().ok()?.to_string(), (s.address(), s.size()))))
        .collect()
}

/// Attribution of one dump's cells to the program's functions.
pub struct Attribution {
    pub total: u64,
    pub per_function: BTreeMap<String, u64>,
}

impl Attribution {
    pub fn fraction(&self, f: &str) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        *self.per_function.get(f).unwrap_or(&0) as f64 / self.total as f64
    }
}

/// Sum the counts of `tag` over the cells that each named function's bytes
/// map to under `formula`.
pub fn attribute(
    exe: &Path,
    dump: &Dump,
    tag: &str,
    formula: Formula,
    functions: &[&str],
) -> Attribution {
    let elf = elf_functions(exe);
    let main_elf = elf.get("main").expect("main in symtab").0;
    let bias = dump.syms["main"].wrapping_sub(main_elf);
    let args = dump.profil[tag];
    let cells = dump.cells.get(tag).cloned().unwrap_or_default();
    let mut per_function = BTreeMap::new();
    for &f in functions {
        let (addr, size) = *elf.get(f).unwrap_or_else(|| panic!("{f} not in symtab"));
        let start = addr.wrapping_add(bias) as usize;
        let mut mine = std::collections::BTreeSet::new();
        for pc in start..start + size as usize {
            if let Tick::Cell(i) = formula.tick(pc, args.offset, args.scale, args.bufsiz) {
                mine.insert(i);
            }
        }
        let n = mine
            .iter()
            .map(|i| cells.get(i).copied().unwrap_or(0))
            .sum();
        per_function.insert(f.to_string(), n);
    }
    Attribution {
        total: cells.values().sum(),
        per_function,
    }
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The first row of `gprof -b -p exe gmon`: (percent, name).
pub fn gprof_top(exe: &Path, gmon: &Path) -> (f64, String, String) {
    let out = Command::new("gprof")
        .args(["-b", "-p"])
        .arg(exe)
        .arg(gmon)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gprof ({e}): install binutils"));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "gprof failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("time"))
        .nth(1)
        .unwrap_or_else(|| panic!("no flat profile rows in:\n{text}"));
    let w: Vec<&str> = row.split_whitespace().collect();
    let pct: f64 = w[0]
        .parse()
        .unwrap_or_else(|_| panic!("bad row {row:?} in:\n{text}"));
    (pct, w.last().unwrap().to_string(), text)
}
