//! Where the ticks outside kernel text went: the attribution behind
//! `profdev sample`'s outside section, which kprof could never give.
//!
//! An [`OutsideCollector`] watches the records of a system-wide session
//! on their way to kprof (tasks tracked): it counts the ticks in the kprof
//! table's range of kernel text (and those of them that were the idle
//! loop), and keys every other tick by process and by where it landed: a
//! kernel address, or a user object and offset (the object the task
//! table's mapping held at the time of the tick: the file that was mapped,
//! opened when its mapping was reported, see `profdev_symbolize::objects`),
//! or a user address no file mapping covers. Nothing is symbolized while
//! the session runs; at the end, [`OutsideCollector::attribute`] names each
//! place once, with the kernel's symbols (kernel text head, kernel modules,
//! other kernel code) and each object's ELF symbols (and its separate debug
//! file's, when found), into a [`profdev_report::outside::Outside`], which
//! `report` renders. A process's name is kept from its first outside tick,
//! so processes long gone by the end are still named. An [`OutsideTap`]
//! puts a collector on every session a factory opens.

use profdev_core::{
    CpuMode, KernelPc, KernelText, ProcessVa, Record, SampleSource, SessionConfig, SourceError,
    SourceFactory, SourceStats,
};
use profdev_formats::kpdata;
use profdev_report::outside::{Outside, Place};
use profdev_symbolize::{KernelSymbols, Object, Objects, Tasks};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an outside tick is keyed by until the end, when it is symbolized.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Kernel(u64),
    /// An object (by id, see `OutsideCollector::objects`) and offset.
    User {
        object: u64,
        offset: u64,
    },
    /// A file mapping whose file could not be opened.
    Unreadable {
        path: String,
    },
    NoMapping {
        what: String,
    },
}

/// Watches the records on their way to kprof: tasks, counts, and every
/// tick outside kernel text.
pub struct OutsideCollector {
    text: KernelText,
    first_bucket: u64,
    tasks: Tasks,
    stats: SourceStats,
    outside: HashMap<(u32, Key), u64>,
    /// The objects ticks landed in, by id.
    objects: HashMap<u64, Arc<Object>>,
    /// Each ticking process's name, when it first ticked outside.
    names: HashMap<u32, String>,
    /// Ticks in kernel text (the kprof table's), and those of them that
    /// were the idle loop (`Sample::is_idle`).
    in_text: u64,
    idle_in_text: u64,
}

impl OutsideCollector {
    /// A collector for a kprof table over `text` in buckets of
    /// 2^`log_bucket` bytes: the table's range starts after kpdata's
    /// special words, so the first bytes of text count as outside.
    pub fn new(text: KernelText, log_bucket: u32) -> Self {
        OutsideCollector {
            text,
            first_bucket: text.start.0 + ((kpdata::SPECIAL_WORDS as u64) << log_bucket),
            tasks: Tasks::with_objects(Objects::new()),
            stats: SourceStats::default(),
            outside: HashMap::new(),
            objects: HashMap::new(),
            names: HashMap::new(),
            in_text: 0,
            idle_in_text: 0,
        }
    }

    /// The collector with `objects` as its tasks' objects table: the one
    /// whose [`Objects::mapping_hook`] the session's live source calls, so
    /// a file is opened when its MMAP record is decoded (a collector made
    /// by [`OutsideCollector::new`] has a table of its own, which no
    /// source feeds).
    pub fn with_objects(mut self, objects: Objects) -> Self {
        self.tasks = Tasks::with_objects(objects);
        self
    }

    /// Samples, lost records and throttles seen.
    pub fn stats(&self) -> SourceStats {
        self.stats
    }

    /// Ticks in the kprof table's range of kernel text.
    pub fn in_text(&self) -> u64 {
        self.in_text
    }

    /// Ticks in that range that were the idle loop (pid 0).
    pub fn idle_in_text(&self) -> u64 {
        self.idle_in_text
    }

    /// Watch a batch of records, in time order.
    pub fn observe(&mut self, records: &[Record]) {
        for r in records {
            match r {
                Record::Sample(s) => {
                    self.stats.samples += 1;
                    if s.ip >= self.first_bucket && s.ip < self.text.end.0 {
                        self.in_text += 1;
                        self.idle_in_text += u64::from(s.is_idle());
                        continue;
                    }
                    // Its time retires processes past their grace.
                    self.tasks.observe(r);
                    if !self.names.contains_key(&s.pid) {
                        if let Some(c) = self.tasks.comm(s.pid) {
                            self.names.insert(s.pid, c.to_string());
                        }
                    }
                    let key = if s.mode == CpuMode::User {
                        match self.tasks.lookup(s.pid, ProcessVa(s.ip)) {
                            Some(m) if m.is_file() && m.object.is_some() => {
                                let object = m.object.clone().expect("checked");
                                let id = object.id();
                                self.objects.entry(id).or_insert(object);
                                Key::User {
                                    object: id,
                                    offset: m.file_offset(ProcessVa(s.ip)),
                                }
                            }
                            Some(m) if m.is_file() => Key::Unreadable {
                                path: m.path.clone(),
                            },
                            Some(m) => Key::NoMapping {
                                what: m.path.clone(),
                            },
                            None => Key::NoMapping {
                                what: "[unmapped]".into(),
                            },
                        }
                    } else {
                        Key::Kernel(s.ip)
                    };
                    *self.outside.entry((s.pid, key)).or_default() += 1;
                }
                Record::Lost { count, .. } => self.stats.lost += count,
                Record::Throttle {
                    throttled: true, ..
                } => self.stats.throttled += 1,
                other => self.tasks.observe(other),
            }
        }
    }

    /// Symbolize every outside tick.
    pub fn attribute(&self, ksyms: &KernelSymbols) -> Outside {
        let mut out = Outside::new();
        let mut keys: Vec<_> = self.outside.iter().collect();
        keys.sort_by_key(|k| k.0 .0);
        for ((pid, key), &n) in keys {
            let comm = match self.names.get(pid).map(String::as_str) {
                Some(c) => c.to_string(),
                None if *pid == 0 => "[idle]".to_string(),
                None => format!("pid {pid}"),
            };
            let place = match key {
                Key::Kernel(ip) => match ksyms.lookup(*ip) {
                    Some((s, _)) if self.text.contains(KernelPc(*ip)) => Place::KernelTextHead {
                        symbol: s.name.clone(),
                    },
                    Some((s, _)) => match &s.module {
                        Some(m) => Place::KernelModule {
                            module: m.clone(),
                            symbol: s.name.clone(),
                        },
                        None => Place::KernelOther {
                            symbol: s.name.clone(),
                        },
                    },
                    None => Place::KernelOther {
                        symbol: format!("{ip:#x}"),
                    },
                },
                Key::User { object, offset } => {
                    let o = &self.objects[object];
                    let module = o.basename().to_string();
                    // Addresses from the object's own layout; names from
                    // its symbols (its debug file's, when installed).
                    let symbol = o
                        .layout()
                        .ok()
                        .and_then(|layout| layout.file_addr_of_offset(*offset))
                        .zip(o.symbols().ok())
                        .map(|(addr, syms)| {
                            syms.symbol(addr)
                                .map_or_else(|| syms.unknown_name(), |(s, _)| s.name())
                        })
                        .unwrap_or_else(|| format!("[unknown] in {module}"));
                    Place::User { module, symbol }
                }
                Key::Unreadable { path } => {
                    let module = path.rsplit('/').next().unwrap_or(path).to_string();
                    Place::User {
                        symbol: format!("[unknown] in {module}"),
                        module,
                    }
                }
                Key::NoMapping { what } => Place::Unknown {
                    module: what.clone(),
                },
            };
            out.add(&comm, *pid, place, n);
        }
        out
    }
}

/// Opens sessions from `inner` with task tracking on, and shows every
/// batch to the collector before the session's reader (kprof) counts it.
pub struct OutsideTap<F> {
    inner: F,
    collector: Arc<Mutex<OutsideCollector>>,
}

impl<F: SourceFactory> OutsideTap<F> {
    /// Sessions of `inner`, watched by `collector`.
    pub fn new(inner: F, collector: Arc<Mutex<OutsideCollector>>) -> Self {
        OutsideTap { inner, collector }
    }
}

impl<F: SourceFactory> SourceFactory for OutsideTap<F> {
    fn open(&self, config: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError> {
        let config = SessionConfig {
            track_tasks: true,
            ..config.clone()
        };
        Ok(Box::new(Tap {
            inner: self.inner.open(&config)?,
            collector: self.collector.clone(),
        }))
    }
}

/// One tapped session.
struct Tap {
    inner: Box<dyn SampleSource>,
    collector: Arc<Mutex<OutsideCollector>>,
}

impl SampleSource for Tap {
    fn read(&mut self, out: &mut Vec<Record>, timeout: Duration) -> Result<(), SourceError> {
        let start = out.len();
        let r = self.inner.read(out, timeout);
        self.collector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(&out[start..]);
        r
    }

    fn flush(&mut self, out: &mut Vec<Record>) {
        let start = out.len();
        self.inner.flush(out);
        self.collector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(&out[start..]);
    }

    fn stats(&self) -> SourceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::Sample;

    const TEXT: KernelText = KernelText {
        start: KernelPc(0xffff_ffff_8100_0000),
        end: KernelPc(0xffff_ffff_8200_0000),
    };

    fn sample(pid: u32, ip: u64, mode: CpuMode) -> Record {
        Record::Sample(Sample {
            pid,
            tid: pid,
            ip,
            mode,
            ..Default::default()
        })
    }

    fn comm(pid: u32, name: &str) -> Record {
        Record::Comm {
            pid,
            tid: pid,
            comm: name.into(),
            exec: true,
            time: 0,
        }
    }

    fn mmap(pid: u32, addr: u64, path: &str) -> Record {
        Record::Mmap {
            pid,
            tid: pid,
            addr,
            len: 0x1000_0000,
            pgoff: 0,
            path: path.into(),
            file: None,
            build_id: None,
            time: 0,
        }
    }

    /// A factory that records the config it was asked for and replays.
    struct Asked(Mutex<Option<SessionConfig>>, Vec<Record>);

    impl SourceFactory for Asked {
        fn open(&self, config: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError> {
            *self.0.lock().unwrap() = Some(config.clone());
            crate::engine::ReplayFactory::new(self.1.clone()).open(config)
        }
    }

    /// The tap turns task tracking on and shows the collector every record
    /// its reader gets, unchanged.
    #[test]
    fn the_tap_shows_every_batch_to_the_collector() {
        let records = vec![
            sample(0, 0xffff_ffff_8100_0010, CpuMode::Kernel),
            sample(7, 0x40_1000, CpuMode::User),
        ];
        let collector = Arc::new(Mutex::new(OutsideCollector::new(TEXT, 3)));
        let tap = OutsideTap::new(Asked(Mutex::new(None), records.clone()), collector.clone());
        let mut source = tap.open(&SessionConfig::system(100)).unwrap();
        let mut got = Vec::new();
        source.read(&mut got, Duration::ZERO).unwrap();
        source.flush(&mut got);
        assert_eq!(got, records);
        assert!(tap.inner.0.lock().unwrap().as_ref().unwrap().track_tasks);
        let c = collector.lock().unwrap();
        assert_eq!(c.stats().samples, 2);
        assert_eq!(source.stats().samples, 2);
    }

    #[test]
    fn idle_ticks_in_text_are_counted_apart() {
        let text = KernelText {
            start: KernelPc(0x1000),
            end: KernelPc(0x9000),
        };
        let mut c = OutsideCollector::new(text, 3);
        c.observe(&[
            sample(0, 0x2000, CpuMode::Kernel),
            sample(0, 0x2008, CpuMode::Kernel),
            sample(7, 0x2000, CpuMode::Kernel),
            sample(0, 0xa000, CpuMode::Kernel), // outside text: not the table's
            Record::Lost {
                cpu: 1,
                count: 4,
                time: 0,
            },
        ]);
        assert_eq!((c.idle_in_text(), c.in_text()), (2, 3));
        assert_eq!((c.stats().samples, c.stats().lost), (4, 4));
    }

    #[test]
    fn kernel_places_are_named_by_the_kernel_symbols() {
        let ksyms = KernelSymbols::from_text(
            b"ffffffff81000000 T _stext\n\
              ffffffff81000100 T head_fn\n\
              ffffffff81ffffff T _etext\n\
              ffffffffa0000000 t mod_fn\t[kvm]\n\
              ffffffff83000000 T init_fn\n",
            "kallsyms",
        )
        .unwrap();
        let mut c = OutsideCollector::new(TEXT, 3);
        c.observe(&[
            comm(5, "qemu"),
            // kpdata's special words shadow the first bytes of text.
            sample(5, 0xffff_ffff_8100_0004, CpuMode::Kernel),
            sample(5, 0xffff_ffff_8100_0104, CpuMode::Kernel), // in the table
            sample(5, 0xffff_ffff_a000_0010, CpuMode::Kernel),
            sample(5, 0xffff_ffff_a000_0010, CpuMode::Kernel),
            sample(6, 0xffff_ffff_8300_0001, CpuMode::Kernel),
            sample(6, 0x10, CpuMode::Kernel), // below every symbol
        ]);
        assert_eq!(c.in_text(), 1);
        let text = c.attribute(&ksyms).render(10);
        for row in [
            "outside kernel text: 5 ticks",
            "3\t 60.0\t5\tqemu",
            "2\t 40.0\t6\tpid 6",
            "2\t 40.0\tkvm\tmod_fn",
            "1\t 20.0\ttext-head\t_stext",
            "1\t 20.0\tkernel\tinit_fn",
            "1\t 20.0\tkernel\t0x10",
        ] {
            assert!(text.contains(row), "{row:?} missing in:\n{text}");
        }
    }

    #[test]
    fn user_places_are_named_by_their_files_symbols() {
        // This test binary plays the user program: find one of its
        // functions and the file offset where its code lies.
        let exe = std::env::current_exe().unwrap();
        let obj = profdev_symbolize::ElfObject::open(&exe).unwrap();
        let f = obj
            .symbols()
            .iter()
            .find(|s| s.size > 16 && s.name().contains("OutsideCollector"))
            .expect("a function of OutsideCollector in the test binary")
            .clone();
        let len = std::fs::metadata(&exe).unwrap().len();
        let offset = (0..len)
            .step_by(64)
            .find_map(|off| {
                let a = obj.file_addr_of_offset(off)?.0;
                (f.addr >= a && f.addr < a + 64).then(|| off + (f.addr - a))
            })
            .expect("the function's file offset");
        let base = 0x5555_0000_0000u64;
        let path = exe.to_str().unwrap();
        let mut c = OutsideCollector::new(TEXT, 3);
        c.observe(&[
            comm(9, "prog"),
            mmap(9, base, path),
            mmap(9, 0x7000_0000_0000, "//anon"),
            sample(9, base + offset + 4, CpuMode::User),
            sample(9, base + offset + 4, CpuMode::User),
            sample(9, 0x7000_0000_0010, CpuMode::User),
            sample(9, 0x10, CpuMode::User),
            mmap(9, 0x6000_0000_0000, "/nonexistent/libgone.so"),
            sample(9, 0x6000_0000_0010, CpuMode::User),
        ]);
        let text = c
            .attribute(&KernelSymbols::from_symbols(Vec::new()))
            .render(10);
        let module = exe.file_name().unwrap().to_str().unwrap();
        for row in [
            "outside kernel text: 5 ticks".to_string(),
            format!("2\t 40.0\t{module}\t{}", f.name()),
            "1\t 20.0\t//anon\t?".into(),
            "1\t 20.0\t[unmapped]\t?".into(),
            "1\t 20.0\tlibgone.so\t[unknown] in libgone.so".into(),
        ] {
            assert!(text.contains(&row), "{row:?} missing in:\n{text}");
        }
    }
}
