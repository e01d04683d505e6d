//! A netlink handle's receive buffer is a mapping of its own, not a block
//! of the heap: the daemon holds several handles at once, and the heap kept
//! a megabyte for the most buffers ever live at once (issue 47's soak grew
//! in 1 MiB steps). A test binary of its own: it counts the heap's blocks
//! through its global allocator. Only reads the test's own namespace.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use plexus_dataplane::Netlink;

/// The system allocator, noting the largest block this thread asks for.
struct Largest;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call goes to the system allocator unchanged.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

#[test]
fn a_handle_takes_no_large_block_of_the_heap() {
    LARGEST.set(0);
    let netlink = Netlink::current().expect("a netlink handle");
    let lo = netlink
        .link_by_name(&"lo".parse().unwrap())
        .expect("a reply");
    assert!(lo.is_some(), "every namespace has lo");
    drop(netlink);
    let largest = LARGEST.get();
    assert!(
        largest < 64 * 1024,
        "a handle and a request took a {largest}-byte block of the heap"
    );
}
