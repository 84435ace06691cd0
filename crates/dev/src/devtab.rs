//! The device table: every device profdev serves, built from one
//! [`DevContext`].

use crate::dev::Dev;
use crate::engine::Engine;
use crate::{kgmon, kprof, prf, prof, stat};
use profdev_core::KernelText;
use std::sync::Arc;

/// What the device table needs to build its devices.
#[derive(Clone)]
pub struct DevContext {
    /// Opens sampling sessions.
    pub engine: Engine,
    /// The running kernel's text, `[_stext, _etext)`.
    pub kernel_text: KernelText,
    /// Online CPUs.
    pub cpus: Vec<u32>,
    /// Entry addresses of the core kernel's functions, ascending (for
    /// kgmon's `selfpc`), e.g. from
    /// `KernelSymbols::text_symbols()` in `profdev-symbolize`.
    pub kernel_functions: Arc<[u64]>,
    /// What prof's `startcp PID` and `startmp… PID` attach with
    /// (`profdev-attach`'s engines; none: those messages are ENXIO).
    pub prof_engines: crate::prof::Engines,
    /// The objects table of the user-mode devices (prof): the one whose
    /// `mapping_hook` the engine's live source calls
    /// (`profdev_sample::PerfFactory::with_mapping_hook`), made by whoever
    /// builds the server; no table is process-wide.
    pub objects: profdev_symbolize::Objects,
}

/// The device table: every device profdev serves, in mount order.
///
/// Adding a device is one line here; the last entry, `stat/`, serves the
/// health of every device before it.
pub fn devtab(ctx: &DevContext) -> Vec<Arc<dyn Dev>> {
    let mut devs: Vec<Arc<dyn Dev>> = vec![
        Arc::new(kprof::Kprof::new(
            kprof::KprofConfig::new(ctx.kernel_text),
            ctx.engine.clone(),
        )),
        Arc::new(prf::Prf::new(
            prf::PrfConfig::new(ctx.cpus.clone()),
            ctx.engine.clone(),
        )),
        Arc::new(kgmon::Kgmon::new(
            kgmon::KgmonConfig::new(ctx.kernel_text, &ctx.kernel_functions),
            ctx.engine.clone(),
        )),
        Arc::new(
            prof::Prof::with_engines(ctx.engine.clone(), ctx.prof_engines.clone())
                .with_objects(ctx.objects.clone()),
        ),
    ];
    devs.push(Arc::new(stat::Stat::of(&devs)));
    devs
}
