//! Which module a sample is in: the tasks table (with the device's objects
//! table, handed to it by whoever built it, which opens each mapped file
//! when its MMAP record arrives and keeps it) and the module number of
//! each object.
//!
//! Everything here may read files (ELF headers, `stat`, `/proc`), so it runs
//! under its own lock, never under the device's: a reader of the device's
//! files waits for no I/O.

use super::ctl::Wanted;
use profdev_core::{CpuMode, ProcessVa, Record, Sample};
use profdev_symbolize::{Mapping, Object, ObjectKey, Objects, Tasks};
use std::collections::HashMap;
use std::sync::Arc;

/// A module's identity: its object's (device, inode and version), not its
/// path. Two mappings of the same file are one module whatever build id
/// the kernel reported with each (an object whose claimed build id is not
/// its own resolves to nothing).
pub type ModuleKey = ObjectKey;

/// What a new record is made of: the module's name, path and object.
#[derive(Clone, Debug)]
pub(super) struct Origin {
    pub(super) name: String,
    pub(super) path: String,
    pub(super) object: Arc<Object>,
}

impl PartialEq for Origin {
    fn eq(&self, o: &Self) -> bool {
        (&self.name, &self.path, self.object.id()) == (&o.name, &o.path, o.object.id())
    }
}

impl Eq for Origin {}

/// What became of one user-mode sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// In no file-backed ELF mapping, or its file could not be read.
    Unresolved,
    /// In a module nobody wants, that has no record.
    NotWanted,
    /// At file address `pc` of module `module`. `origin` (name and path)
    /// is given the first time a wanted module is hit: the device makes
    /// its record then.
    Hit {
        module: u32,
        pc: u64,
        origin: Option<Box<Origin>>,
    },
}

/// The tasks and modules of one device, and what it has resolved.
pub(super) struct Resolver {
    objects: Objects,
    tasks: Tasks,
    /// Module number of each object identity.
    ids: HashMap<ModuleKey, u32>,
    /// The same by object id: the per-sample lookup, which allocates
    /// nothing.
    by_object: HashMap<u64, u32>,
    /// The object of each module with a record, kept open: the record's
    /// file is the one that was mapped, even once replaced at its path.
    held: HashMap<u32, Arc<Object>>,
}

impl Resolver {
    /// A resolver whose tasks tables open and keep files in `objects`.
    pub(super) fn new(objects: Objects) -> Self {
        Resolver {
            tasks: Tasks::with_objects(objects.clone()),
            objects,
            ids: HashMap::new(),
            by_object: HashMap::new(),
            held: HashMap::new(),
        }
    }

    /// Forget every task and module (`end`); the objects table stays.
    pub(super) fn clear(&mut self) {
        *self = Resolver::new(self.objects.clone());
    }

    /// A new session describes every task afresh.
    pub(super) fn new_session(&mut self) {
        self.tasks = Tasks::with_objects(self.objects.clone());
    }

    /// Resolve a batch: one outcome per user-mode sample, in order.
    pub(super) fn batch(&mut self, records: &[Record], wanted: &[Wanted]) -> Vec<Outcome> {
        let mut out = Vec::new();
        for r in records {
            // Samples too: their time retires processes past their grace.
            self.tasks.observe(r);
            if let Record::Sample(s) = r {
                if let Some(o) = self.sample(s, wanted) {
                    out.push(o);
                }
            }
        }
        out
    }

    fn sample(&mut self, s: &Sample, wanted: &[Wanted]) -> Option<Outcome> {
        if s.mode == CpuMode::Kernel || s.is_idle() {
            return None;
        }
        let va = ProcessVa(s.ip);
        let Some(m) = self.tasks.lookup(s.pid, va).filter(|m| m.is_file()) else {
            return Some(Outcome::Unresolved);
        };
        let Some(object) = &m.object else {
            return Some(Outcome::Unresolved);
        };
        let known = self.by_object.get(&object.id()).copied();
        if known.is_none() && !wants(wanted, m) {
            return Some(Outcome::NotWanted);
        }
        // Loaded once per object, on its first sample.
        let Ok(layout) = object.layout() else {
            return Some(Outcome::Unresolved);
        };
        let Some(pc) = layout.file_addr_of_offset(m.file_offset(va)) else {
            return Some(Outcome::Unresolved);
        };
        let module = match known {
            Some(module) => module,
            None => {
                let key = ModuleKey {
                    claimed_build_id: None,
                    ..object.key().clone()
                };
                let next = self.ids.len() as u32;
                let module = *self.ids.entry(key).or_insert(next);
                self.by_object.insert(object.id(), module);
                module
            }
        };
        let origin = if self.held.contains_key(&module) || !wants(wanted, m) {
            None
        } else {
            self.held.insert(module, object.clone());
            Some(Box::new(Origin {
                name: m.basename().to_string(),
                path: m.path.clone(),
                object: object.clone(),
            }))
        };
        Some(Outcome::Hit {
            module,
            pc: pc.0,
            origin,
        })
    }
}

/// True if `m` is in the list (an empty list wants everything).
fn wants(wanted: &[Wanted], m: &Mapping) -> bool {
    wanted.is_empty()
        || wanted.iter().any(|w| {
            w.raw == m.path || w.raw == m.basename() || w.canonical.as_deref() == Some(&m.path)
        })
}
