//! Why a task operation did not happen: the one error enum of the tasks extension.
//!
//! Owns: `TaskError` and what each variant blames (the peer, us, the tool or the OS).
//! Called by: every file of `tasks` that can fail, and `modern::task_call`, which turns each
//! into an answer (`NotFound` and `Misrouted` are -32602; on `Full` the call runs on in its request).
//! Never: carries a `String` or chooses a JSON-RPC code (that mapping is the caller's).

/// Why a task operation did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TaskError {
    /// The peer named a task this core does not hold: malformed, never created, or deleted
    /// after its retention (SEP-2663: -32602).
    #[error("task not found (unknown or expired)")]
    NotFound,
    /// The peer named a task of another node (`--node-id`): the balancer in front sent the
    /// request to the wrong node (SEP-2663: -32602, as for an unknown task).
    #[error("task not found on this node: its id names another node (misrouted)")]
    Misrouted,
    /// This core holds `--max-tasks-per-core` tasks (peer load): no new task.
    #[error("too many tasks on this core (--max-tasks-per-core)")]
    Full,
    /// The OS random source failed (the OS).
    #[error("OS random source failed")]
    Random,
    /// The tool asked for more than `--max-task-input-requests` inputs at once (the tool).
    #[error("too many pending input requests (--max-task-input-requests)")]
    TooManyInputRequests,
    /// The task was cancelled or deleted while the tool waited (the peer, or its retention).
    #[error("task cancelled")]
    Cancelled,
}
