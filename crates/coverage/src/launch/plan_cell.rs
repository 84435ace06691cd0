//! A module's plan as the server holds it: there, or being read from the
//! cache on a thread of its own while the module's first load is served
//! from the cache file's header and encoding ([`crate::cache::Split`]).
//! cc1's plan (1,350,000 blocks) takes a quarter of a second to read,
//! which its process no longer waits for; whoever needs the plan itself
//! (an encoding made afresh, a skipped patch's block, the counts
//! collected) waits for it then.

use super::*;
use std::sync::Condvar;

/// Plans smaller than this in the file are read at once (a thread would
/// cost more than it saves).
const READ_APART: usize = 256 << 10;

/// What a plan's reading came to (an error names the file and why).
type Outcome = Option<Result<Arc<Plan>, String>>;

/// A module's plan, there or on its way.
#[derive(Clone)]
pub(super) struct PlanCell {
    /// Its counters ([`Plan::counters`]), known before the plan.
    counters: u64,
    /// Its area's size for plain counting code, when known before the
    /// plan (from the cache file's header).
    size: Option<u64>,
    slot: Arc<(Mutex<Outcome>, Condvar)>,
}

impl PlanCell {
    /// A plan made or read already.
    pub(super) fn ready(plan: Arc<Plan>) -> PlanCell {
        PlanCell {
            counters: plan.counters(),
            size: None,
            slot: Arc::new((Mutex::new(Some(Ok(plan))), Condvar::new())),
        }
    }

    /// The plan of `split` (from the cache file `file`), read on a thread
    /// of its own (here, when it is small, when `here` (a plan for
    /// another user's process: one such plan is read at a time, so that
    /// the server's memory peak is one module's), or when no thread can
    /// be started).
    pub(super) fn reading(split: crate::cache::Split, file: &Path, here: bool) -> PlanCell {
        let apart = if here { usize::MAX } else { READ_APART };
        Self::reading_apart(split, file, apart)
    }

    /// [`PlanCell::reading`], on a thread when the plan takes `apart`
    /// bytes or more.
    fn reading_apart(split: crate::cache::Split, file: &Path, apart: usize) -> PlanCell {
        let cell = PlanCell {
            counters: split.counters,
            size: Some(split.size),
            slot: Arc::new((Mutex::new(None), Condvar::new())),
        };
        let name = file.display().to_string();
        let small = split.plan_bytes() < apart;
        let job = Arc::new(Mutex::new(Some(split)));
        let run = {
            let (slot, job) = (cell.slot.clone(), job.clone());
            move || {
                let split = job.lock().unwrap_or_else(|e| e.into_inner()).take();
                let Some(split) = split else { return };
                // Whatever happens (a panic too), the waiters are told.
                let mut done = Done(&slot, Err(format!("{name}: its plan could not be read")));
                done.1 = split
                    .plan()
                    .map(Arc::new)
                    .map_err(|why| format!("{name}: {why}"));
            }
        };
        if small {
            run();
            return cell;
        }
        let spawned = std::thread::Builder::new()
            .name("profdev-cov-plan".into())
            .spawn(run.clone());
        if spawned.is_err() {
            run();
        }
        cell
    }

    /// The module's counters.
    pub(super) fn counters(&self) -> u64 {
        self.counters
    }

    /// The area's size for trampolines made with `opts`, without waiting
    /// for the plan when the cache file's header gave it.
    pub(super) fn area_size(&self, opts: crate::encode::Options) -> Result<u64, String> {
        match self.size {
            Some(n) if opts == crate::encode::Options::default() => Ok(n),
            _ => Ok(crate::encode::area_size_with(&*self.get()?, opts)),
        }
    }

    /// The plan, once read (an error, one sentence, if it could not be).
    pub(super) fn get(&self) -> Result<Arc<Plan>, String> {
        let (m, cv) = &*self.slot;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = &*g {
                return r.clone();
            }
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The plan itself, `held` being the [`PlanCell::get`] of this cell:
    /// the cell gives up its own reference, and if `held` is then the
    /// last, the plan is the caller's (the cell answers an error from
    /// then on). Otherwise (a clone of the cell or of the plan lives on)
    /// `held` comes back, and the cell is unchanged.
    pub(super) fn take(&self, held: Arc<Plan>) -> Result<Plan, Arc<Plan>> {
        let (m, _) = &*self.slot;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        let mine = match g.take() {
            Some(Ok(p)) if Arc::ptr_eq(&p, &held) => p,
            other => {
                *g = other;
                return Err(held);
            }
        };
        drop(mine);
        match Arc::try_unwrap(held) {
            Ok(plan) => {
                *g = Some(Err("its plan was taken by the counts".into()));
                Ok(plan)
            }
            Err(held) => {
                *g = Some(Ok(held.clone()));
                Err(held)
            }
        }
    }
}

/// Sets the outcome and wakes the waiters when dropped.
struct Done<'a>(&'a (Mutex<Outcome>, Condvar), Result<Arc<Plan>, String>);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let r = std::mem::replace(&mut self.1, Err(String::new()));
        *self.0 .0.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        self.0 .1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::Options;

    /// A load's counters and area size are known before its plan is read
    /// (a plan read on a thread is the plan written); a damaged plan is
    /// named when asked for, not before.
    #[test]
    fn a_load_is_sized_before_its_plan_is_read_and_a_bad_plan_is_named() {
        let bytes = std::fs::read("/usr/bin/true").unwrap();
        let plan = Plan::of_bytes_in(&bytes, Path::new("/usr/bin/true"), Mode::Counts).unwrap();
        let key = Key::of(&bytes, Mode::Counts);
        let file = crate::cache::write(&key, &plan, None);
        let split = |b: &[u8]| crate::cache::split(b.to_vec(), &key).unwrap();
        let size = crate::encode::area_size(&plan);
        let good = PlanCell::reading_apart(split(&file), Path::new("/c/good"), 0);
        assert_eq!(good.counters(), plan.counters());
        assert_eq!(good.area_size(Options::default()), Ok(size));
        assert_eq!(format!("{:?}", *good.get().unwrap()), format!("{plan:?}"));
        // The plan's last field (its edges, none) and the file's (no
        // encoding): one edge more than the plan's bytes hold.
        let mut bad = file.clone();
        let n = bad.len();
        assert_eq!(bad[n - 2..], [0, 0]);
        bad[n - 2] = 1;
        let cell = PlanCell::reading_apart(split(&bad), Path::new("/c/bad"), 0);
        assert_eq!(cell.counters(), plan.counters());
        assert_eq!(cell.area_size(Options::default()), Ok(size));
        let why = "/c/bad: a length runs past its end".to_string();
        assert_eq!(cell.get().err(), Some(why.clone()));
        // Trampolines of other options are sized from the plan itself.
        let other = Options { call_targets: true };
        assert_eq!(cell.area_size(other), Err(why));
        assert_eq!(
            good.area_size(other),
            Ok(crate::encode::area_size_with(&plan, other))
        );
    }
}
