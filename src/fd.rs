//! The one audited `unsafe` of the crate: a monoio socket's file descriptor borrowed for the
//! length of a closure (`with_borrowed_fd`). monoio's `TcpStream` has `AsRawFd` but no `AsFd`,
//! so the safe fd APIs (std's `try_clone_to_owned`, rustix's socket calls) cannot take it
//! directly; every caller goes through here instead of writing its own `unsafe` block.
//!
//! Never: closes the descriptor, or lets the borrow outlive the socket it came from.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Runs `use_fd` with `socket`'s descriptor borrowed; what it returns cannot hold the borrow
/// (the closure is generic over the borrow's lifetime).
#[allow(unsafe_code)]
pub(crate) fn with_borrowed_fd<S: AsRawFd, R>(
    socket: &S,
    use_fd: impl for<'fd> FnOnce(BorrowedFd<'fd>) -> R,
) -> R {
    let raw = socket.as_raw_fd();
    // SAFETY: `raw` is the open descriptor `socket` owns; `socket` is borrowed for this whole
    // call, so the descriptor stays open while `use_fd` runs, and `BorrowedFd` never closes it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(raw) };
    use_fd(borrowed)
}
