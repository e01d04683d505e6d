//! NetNs: opening, running code inside, named create/delete.
mod common;

use std::os::unix::fs::MetadataExt;

use common::{current_ns_inode, is_root, root_ns, TestNs};
use plexus_dataplane::{Errno, Error, NetNs};

#[test]
fn run_enters_namespace_and_returns_the_caller() {
    let Some(t) = root_ns() else { return };
    let before = current_ns_inode();
    let ns_inode = std::fs::metadata(t.ns.path()).unwrap().ino();
    assert_ne!(before, ns_inode);
    let (inside, tid) =
        t.ns.run(|| (current_ns_inode(), nix::unistd::gettid()))
            .unwrap();
    assert_eq!(inside, ns_inode, "closure ran in the namespace");
    assert_eq!(tid, nix::unistd::gettid(), "on the calling thread");
    assert_eq!(current_ns_inode(), before, "caller is back home");
}

#[test]
fn run_propagates_panics_and_caller_stays() {
    let Some(t) = root_ns() else { return };
    let before = current_ns_inode();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.ns.run(|| panic!("boom"))));
    assert!(r.is_err());
    assert_eq!(current_ns_inode(), before);
}

#[test]
fn run_borrows_from_caller() {
    let Some(t) = root_ns() else { return };
    let mut seen = Vec::new();
    t.ns.run(|| seen.push(std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap()))
        .unwrap();
    assert_eq!(seen.len(), 1);
}

#[test]
fn current_and_same_as() {
    let Some(t) = root_ns() else { return };
    let here = NetNs::current().unwrap();
    let again = NetNs::open("/proc/self/ns/net").unwrap();
    assert!(here.same_as(&again).unwrap());
    assert!(!here.same_as(&t.ns).unwrap());
    let reopened = NetNs::open_named(&t.name).unwrap();
    assert!(reopened.same_as(&t.ns).unwrap());
    // Inside the namespace, "current" is that namespace.
    assert!(t
        .ns
        .run(|| NetNs::current().unwrap().same_as(&t.ns).unwrap())
        .unwrap());
}

#[test]
fn create_named_is_visible_to_ip_and_delete_is_idempotent() {
    if !is_root() {
        return;
    }
    let name = format!("pxt-{}-named", std::process::id());
    let _ = NetNs::delete_named(&name);
    let ns = NetNs::create_named(&name).unwrap();
    // Deletes the namespace even if an assertion below fails.
    struct Cleanup<'a>(&'a str);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = NetNs::delete_named(self.0);
        }
    }
    let _cleanup = Cleanup(&name);
    // (`ip -j netns list` prints plain text on this iproute2.)
    let listed = common::run("ip", &["netns", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name.as_str())),
        "{listed}"
    );
    // A fresh namespace has exactly one link: lo.
    let links = common::ip_json(&["-n", &name, "link", "show"]);
    assert_eq!(links.len(), 1);
    assert_eq!(links[0]["ifname"], "lo");
    // Creating it again fails with EEXIST and leaves the first one alone.
    let e = NetNs::create_named(&name).unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(NetNs::open_named(&name).unwrap().same_as(&ns).unwrap());
    assert!(NetNs::delete_named(&name).unwrap());
    assert!(
        !NetNs::delete_named(&name).unwrap(),
        "second delete is a no-op"
    );
    assert!(!std::path::Path::new("/var/run/netns").join(&name).exists());
    // Our handle still works after the mount is gone.
    assert!(ns.run(|| 1).unwrap() == 1);
}

#[test]
fn open_errors_name_path_and_errno() {
    let e = NetNs::open("/var/run/netns/pxt-does-not-exist").unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOENT));
    assert!(
        e.to_string().contains("/var/run/netns/pxt-does-not-exist"),
        "{e}"
    );
    assert!(e.is_not_found());

    let f = tempfile::NamedTempFile::new().unwrap();
    let e = NetNs::open(f.path()).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    assert!(
        e.to_string().contains(&f.path().display().to_string()),
        "{e}"
    );

    // A namespace file of another type.
    let e = NetNs::open("/proc/self/ns/uts").unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
}

#[test]
fn named_rejects_bad_names() {
    for n in ["", "..", "a/b"] {
        assert!(matches!(NetNs::create_named(n), Err(Error::Invalid { .. })));
        assert!(matches!(NetNs::delete_named(n), Err(Error::Invalid { .. })));
    }
}

#[test]
fn test_guard_deletes_its_namespace_when_a_test_panics() {
    if !is_root() {
        return;
    }
    let mut name = String::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let t = TestNs::new();
        name = t.name.clone();
        assert!(std::path::Path::new("/var/run/netns")
            .join(&t.name)
            .exists());
        panic!("simulated test failure");
    }));
    assert!(r.is_err());
    assert!(
        name.starts_with(&format!("pxt-{}-", std::process::id())),
        "{name}"
    );
    assert!(!std::path::Path::new("/var/run/netns").join(&name).exists());
}
