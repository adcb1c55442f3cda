//! Upstream tool catalogs of one core, shared by content and held to a byte budget
//! (`--upstream-catalog-bytes-per-core`, CONTRACT §11).
//!
//! Every per-session link lists its upstream's tools, and most sessions of one upstream are
//! listed the same tools: each listing is kept once per core (`Listing`, shared by `Rc`), found
//! by a hash of its JSON and confirmed equal before it is shared, and dropped when the last
//! link holding it drops it. The bytes of the distinct listings a core holds (their JSON size)
//! count against the budget; a listing that would take it past is refused, and the session
//! whose start needed it gets 503 + `Retry-After` naming the flag (`upstream::Bridge`).
//!
//! Owns: the core's store (a thread-local: one core is one thread), its byte count and the
//! `tidemark_upstream_catalog_bytes` gauge. Never: holds a listing no link holds, or compares a
//! listing by hash alone.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::rc::{Rc, Weak};

use crate::provider::ToolInfo;

/// One distinct tool listing, as clients see it (filtered, names prefixed).
pub(crate) struct Listing {
    pub(crate) tools: Vec<ToolInfo>,
    /// Its JSON size: what it counts against the budget.
    bytes: usize,
    hash: u64,
}

impl Listing {
    /// A listing outside the store (an empty catalog, a listing of no link yet): no bytes.
    pub(crate) fn empty() -> Rc<Listing> {
        Rc::new(Listing { tools: Vec::new(), bytes: 0, hash: 0 })
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        // At thread exit the store may be gone before the last listing: nothing to count then.
        let _ = STORE.try_with(|store| store.borrow_mut().release(self.hash, self.bytes));
    }
}

/// A listing the budget could not take.
#[derive(Debug)]
pub(crate) struct OverBudget {
    /// Bytes the core's catalogs hold.
    pub(crate) held: usize,
    /// Bytes of the listing refused.
    pub(crate) needed: usize,
}

#[derive(Default)]
struct Store {
    by_hash: HashMap<u64, Vec<Weak<Listing>>>,
    bytes: usize,
}

impl Store {
    fn release(&mut self, hash: u64, bytes: usize) {
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(same) = self.by_hash.get_mut(&hash) {
            same.retain(|w| w.strong_count() > 0);
            if same.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
        report(self.bytes);
    }
}

thread_local! {
    static STORE: RefCell<Store> = RefCell::new(Store::default());
}

/// `tools` as a listing of this core: the one already held when an equal listing is, else a new
/// one when the budget (`budget` bytes per core) has room for it; `replacing` is the listing
/// the caller's link holds now, whose bytes count as free when no other link holds it.
pub(crate) fn admit(
    tools: Vec<ToolInfo>,
    budget: usize,
    replacing: &Rc<Listing>,
) -> Result<Rc<Listing>, OverBudget> {
    if tools.is_empty() {
        return Ok(Listing::empty());
    }
    let (hash, bytes) = measure(&tools);
    STORE.with(|store| {
        let mut store = store.borrow_mut();
        let same = store.by_hash.get(&hash).into_iter().flatten();
        if let Some(held) = same.filter_map(Weak::upgrade).find(|l| l.tools == tools) {
            return Ok(held);
        }
        let freed = if Rc::strong_count(replacing) == 1 { replacing.bytes } else { 0 };
        let held = store.bytes.saturating_sub(freed);
        if held + bytes > budget {
            return Err(OverBudget { held: store.bytes, needed: bytes });
        }
        let listing = Rc::new(Listing { tools, bytes, hash });
        store.by_hash.entry(hash).or_default().push(Rc::downgrade(&listing));
        store.bytes += bytes;
        report(store.bytes);
        Ok(listing)
    })
}

/// The hash and JSON size of `tools`, without keeping the JSON.
fn measure(tools: &[ToolInfo]) -> (u64, usize) {
    let mut sink = Measure { hasher: DefaultHasher::new(), bytes: 0 };
    for tool in tools {
        // Writing to `Measure` cannot fail.
        let _ = serde_json::to_writer(&mut sink, &tool.to_json());
    }
    (sink.hasher.finish(), sink.bytes)
}

/// A `Write` that hashes and counts what it is given.
struct Measure {
    hasher: DefaultHasher,
    bytes: usize,
}

impl std::io::Write for Measure {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hasher.write(buf);
        self.bytes += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The core's gauge.
fn report(bytes: usize) {
    if let Some(metrics) = crate::metrics::this_core() {
        metrics.upstream_catalog_bytes.set(bytes as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Annotations;

    fn tools(names: &[&str]) -> Vec<ToolInfo> {
        names
            .iter()
            .map(|n| ToolInfo {
                name: (*n).to_owned(),
                description: Some("x".repeat(100)),
                input_schema: serde_json::json!({ "type": "object" }),
                output_schema: None,
                annotations: Annotations::default(),
            })
            .collect()
    }

    #[test]
    fn equal_listings_are_shared_and_the_budget_holds_at_the_limit() {
        let none = Listing::empty();
        let (_, one) = measure(&tools(&["a"]));
        let a = admit(tools(&["a"]), 2 * one, &none).expect("fits");
        let a2 = admit(tools(&["a"]), 2 * one, &none).expect("shared, no new bytes");
        assert!(Rc::ptr_eq(&a, &a2));
        let b = admit(tools(&["b"]), 2 * one, &none).expect("at the limit");
        let Err(refused) = admit(tools(&["c"]), 2 * one, &none) else { panic!("past the limit") };
        assert_eq!((refused.held, refused.needed), (2 * one, one));
        // A link that alone holds `b` may replace it within the same bytes.
        let c = admit(tools(&["c"]), 2 * one, &b).expect("replacing frees");
        drop(b);
        drop((a, a2));
        let d = admit(tools(&["d"]), 2 * one, &none).expect("freed by the last holder");
        drop((c, d));
        assert_eq!(STORE.with(|s| s.borrow().bytes), 0);
    }
}
