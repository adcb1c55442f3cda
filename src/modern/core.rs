//! The modern era's state on one core (`ModernCore`): the shared `crate::core::Core` and what
//! only 2026-07-28 keeps per core, the `Idempotency-Key` records (`keyed`) and the tasks
//! (`tasks`). Built by `endpoint::Endpoint::new`; read by every file of `modern`. Never: holds
//! anything of a legacy session.

use std::rc::Rc;

use super::keyed;
use super::tasks;
use crate::core::Core;

/// The modern era's state on one core: the shared `Core` (config, registry, metrics, read
/// through `Deref`) and what only this era keeps: the `Idempotency-Key` records of the keys
/// this core owns (`keyed`) and the tasks it created (`tasks`).
pub(crate) struct ModernCore {
    shared: Rc<Core>,
    /// 2026-07-28 Idempotency-Key records of the keys this core owns (`keyed`).
    pub(crate) keys: Rc<std::cell::RefCell<keyed::KeyTable>>,
    /// 2026-07-28 tasks (`io.modelcontextprotocol/tasks`) this core created (`tasks`).
    pub(crate) tasks: tasks::TaskStore,
    /// Task ids (hashed with `miss_keys`) the durable store said it lacks, within
    /// `durable::MISS_TTL`: a repeated `tasks/get` of a forged or stale id of another node costs
    /// the store one lookup a second (`durable::recover_task`), as a session id does.
    pub(crate) task_misses: std::cell::RefCell<crate::durable::Misses<u64>>,
    /// Randomly keyed, so a client cannot choose ids that collide in `task_misses`.
    pub(crate) miss_keys: std::hash::RandomState,
}

impl ModernCore {
    /// The modern state of core `shared`: no key, no task yet.
    pub(crate) fn new(shared: Rc<Core>) -> ModernCore {
        let cfg = &shared.cfg;
        let limits = keyed::KeyLimits {
            keys_max: cfg.modern.idempotency_keys_per_core_max,
            running_per_client_max: cfg.modern.keyed_calls_running_per_client_max,
            call_max: cfg.modern.keyed_call_max,
        };
        let metrics = shared.metrics.clone();
        let keys = keyed::KeyTable::new(limits, cfg.modern.idempotency_bytes_per_core, metrics);
        let limits = tasks::TaskLimits::from_config(cfg);
        let tasks = tasks::TaskStore::new(
            shared.cfg.server.node_id,
            shared.index,
            limits,
            shared.metrics.clone(),
            shared.mirror.clone(),
        );
        ModernCore {
            keys: Rc::new(std::cell::RefCell::new(keys)),
            tasks,
            task_misses: std::cell::RefCell::default(),
            miss_keys: std::hash::RandomState::new(),
            shared,
        }
    }
}

impl std::ops::Deref for ModernCore {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.shared
    }
}
