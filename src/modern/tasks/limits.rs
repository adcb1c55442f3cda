//! The bounds of one core's task store, read from the operator's `Config`.
//!
//! Owns: `TaskLimits` (count, retention, byte budget, input requests, poll-interval hint).
//! Called by: `runtime` when it builds a core's `TaskStore`; the store and its handles read
//! the values.
//! Never: validates or defaults a value (`config` does; zero is rejected there).

use std::time::Duration;

use crate::config::Config;

/// The bounds of one core's store (from `Config`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskLimits {
    pub(super) tasks_max: usize,
    pub(super) retention: Duration,
    pub(super) bytes_max: usize,
    pub(super) input_requests_max: usize,
    pub(super) poll_interval: Duration,
}

impl TaskLimits {
    pub(crate) fn from_config(cfg: &Config) -> TaskLimits {
        TaskLimits {
            tasks_max: cfg.modern.tasks_per_core_max,
            retention: cfg.modern.task_retention,
            bytes_max: cfg.modern.task_bytes_per_core,
            input_requests_max: cfg.modern.task_input_requests_max,
            poll_interval: cfg.modern.task_poll_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_config() {
        // Goal: the flags reach the store. Method: a config with every task value changed.
        let cfg = {
            let mut edited = Config::default();
            edited.modern.tasks_per_core_max = 1;
            edited.modern.task_retention = Duration::from_secs(2);
            edited.modern.task_bytes_per_core = 3;
            edited.modern.task_input_requests_max = 4;
            edited.modern.task_poll_interval = Duration::from_millis(5);
            edited
        };
        let limits = TaskLimits::from_config(&cfg);
        assert_eq!((limits.tasks_max, limits.bytes_max, limits.input_requests_max), (1, 3, 4));
        assert_eq!(
            (limits.retention, limits.poll_interval),
            (Duration::from_secs(2), Duration::from_millis(5))
        );
    }
}
