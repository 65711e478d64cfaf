//! The client's live heap, counted by the global allocator: what holding
//! many guards costs in memory, independent of what the process allocated
//! and freed before (resident memory is not: memory freed by an earlier run
//! is reused without growing it, so it depends on the order of the runs).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

/// Bytes allocated and not yet freed, by every thread of this process.
static LIVE: AtomicI64 = AtomicI64::new(0);

/// The system allocator, counting the live bytes (one relaxed atomic add
/// per allocation and per free, paid alike by every subject measured).
pub struct Counting;

fn signed(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded to `System` with the caller's arguments;
// the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract for `layout`.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(signed(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(signed(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(signed(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(signed(new_size) - signed(layout.size()), Ordering::Relaxed);
        }
        p
    }
}

/// Bytes on the heap now (allocated and not freed since the start).
pub fn live_bytes() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_held_and_forgets_what_is_freed() {
        let before = live_bytes();
        let held: Vec<u8> = Vec::with_capacity(1 << 20);
        let grown = live_bytes() - before;
        // Other test threads allocate too, but not a megabyte at once.
        assert!(
            ((1 << 20) - (64 << 10)..(1 << 20) + (64 << 10)).contains(&grown),
            "{grown}"
        );
        drop(held);
        let after = live_bytes() - before;
        assert!(after.abs() < 64 << 10, "{after}");
    }
}
