//! Pinning inside the process's CPU set: `on_core` outside the set `taskset` gave the process
//! is refused, naming the core and the set; unpinned bus threads run on the process's set, not
//! on the core the caller of `start()` is pinned to.
//!
//! The taskset case runs this test binary again as a child under `taskset -c <core>` (the
//! child is the same test, told so by an environment variable), so the narrowed mask never
//! touches the other tests' threads.

use std::sync::{Arc, Mutex};

use llbus::{Actor, Bus, Context, Idle, Setup, StartError};

/// The cores the calling thread may run on now.
fn thread_cores() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the size is that of `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `i` is below the set's capacity.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// Records the cores its thread may run on, then stops the bus.
struct Where {
    seen: Arc<Mutex<Vec<usize>>>,
}

impl Actor for Where {
    type In = ();
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        *self.seen.lock().unwrap() = thread_cores();
        ctx.request_stop();
    }
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
}

/// The cores an unpinned bus thread gets when `start()` is called from the current thread.
fn unpinned_thread_cores() -> Vec<usize> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut bus = Bus::builder();
    let s = Arc::clone(&seen);
    bus.actor("where", move |_: &mut Setup<'_>| Where {
        seen: Arc::clone(&s),
    });
    bus.start().expect("starts").join().expect("joins");
    let cores = seen.lock().unwrap().clone();
    cores
}

#[test]
fn unpinned_threads_run_on_the_process_set_not_on_the_callers_core() {
    let allowed = llbus::allowed_cores();
    if allowed.len() < 2 {
        eprintln!(
            "SKIPPED ****** this process may use only cores {allowed:?}: pinning the caller to one of two cores needs two"
        );
        return;
    }
    let last = *allowed.last().unwrap();
    let got = tests::bounded("a bus started from a pinned thread", 30, move || {
        llbus::pin_to_core(last).expect("pin the caller");
        assert_eq!(thread_cores(), [last]);
        unpinned_thread_cores()
    });
    assert_eq!(
        got, allowed,
        "an unpinned bus thread inherited the caller's core {last}"
    );
}

const CHILD: &str = "LLBUS_TEST_TASKSET_CHILD";

/// The child's side: run under `taskset -c <core>`.
fn as_taskset_child(core: usize) {
    assert_eq!(llbus::allowed_cores(), [core], "the mask taskset set");
    let other = usize::from(core == 0);
    // A pin outside the set is refused, naming the core and the set.
    let mut bus = Bus::builder();
    bus.actor("where", |_: &mut Setup<'_>| Where {
        seen: Arc::default(),
    })
    .on_core(other);
    match bus.start() {
        Err(StartError::CoreNotAllowed {
            thread,
            core: c,
            allowed,
        }) => {
            assert_eq!((thread.as_str(), c, allowed), ("where", other, vec![core]));
        }
        Err(e) => panic!("expected CoreNotAllowed, got {e}"),
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("on_core({other}) escaped the process's mask [{core}]");
        }
    }
    // A pin inside it works; unpinned threads stay inside it.
    let mut bus = Bus::builder();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    bus.actor("where", move |_: &mut Setup<'_>| Where {
        seen: Arc::clone(&s),
    })
    .on_core(core);
    bus.start().expect("pinned inside").join().expect("joins");
    assert_eq!(*seen.lock().unwrap(), [core]);
    assert_eq!(unpinned_thread_cores(), [core]);
    // Two busy spinners confined to the one allowed core would starve each other.
    let mut bus = Bus::builder();
    bus.actor("a", |_: &mut Setup<'_>| Where {
        seen: Arc::default(),
    })
    .idle(Idle::BusySpin);
    bus.actor("b", |_: &mut Setup<'_>| Where {
        seen: Arc::default(),
    })
    .idle(Idle::BusySpin);
    match bus.start() {
        Err(StartError::SharedBusyCore { core: c, .. }) => assert_eq!(c, core),
        Err(e) => panic!("expected SharedBusyCore, got {e}"),
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("two busy spinners were allowed on the single core {core}");
        }
    }
    println!("taskset child: all checks passed");
}

#[test]
fn on_core_outside_the_taskset_mask_is_refused() {
    if let Ok(core) = std::env::var(CHILD) {
        as_taskset_child(core.parse().expect("a core id"));
        return;
    }
    let allowed = llbus::allowed_cores();
    if allowed.len() < 2
        || std::process::Command::new("taskset")
            .arg("-V")
            .output()
            .is_err()
    {
        eprintln!(
            "SKIPPED ****** needs two allowed cores (have {allowed:?}) and taskset (util-linux)"
        );
        return;
    }
    let core = allowed[1];
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new("taskset")
        .arg("-c")
        .arg(core.to_string())
        .arg(exe)
        .args([
            "--exact",
            "pinning::on_core_outside_the_taskset_mask_is_refused",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, core.to_string())
        .output()
        .expect("run the child under taskset");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("taskset child: all checks passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

const MAIN_PINNED_CHILD: &str = "LLBUS_TEST_MAIN_PINNED_CHILD";

/// Pins the process's main thread (whose thread id is the process id) to `core`, as a `main`
/// that pins itself before `start()` does.
fn pin_main_thread(core: usize) {
    // SAFETY: `cpu_set_t` is plain data, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` is below the set's capacity (it is an allowed core id).
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: the main thread's id is the process id; `set` is initialised and of the size
    // passed.
    let rc = unsafe {
        libc::sched_setaffinity(libc::getpid(), std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// The child's side: its main thread pins itself to the first allowed core, and the bus still
/// sees the whole set the process started with.
fn as_main_pinned_child(allowed: &[usize]) {
    pin_main_thread(allowed[0]);
    assert_eq!(
        llbus::allowed_cores(),
        allowed,
        "the allowed set shrank to the main thread's pin"
    );
    let other = allowed[allowed.len() - 1];
    let mut bus = Bus::builder();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    bus.actor("where", move |_: &mut Setup<'_>| Where {
        seen: Arc::clone(&s),
    })
    .on_core(other);
    bus.start()
        .expect("on_core of another allowed core starts")
        .join()
        .expect("joins");
    assert_eq!(*seen.lock().unwrap(), [other]);
    assert_eq!(unpinned_thread_cores(), allowed);
    println!("main-pinned child: all checks passed");
}

#[test]
fn a_main_thread_that_pins_itself_does_not_shrink_the_bus_s_cores() {
    let allowed = llbus::allowed_cores();
    if let Ok(list) = std::env::var(MAIN_PINNED_CHILD) {
        let parent: Vec<usize> = list.split(',').map(|c| c.parse().unwrap()).collect();
        assert_eq!(allowed, parent, "the child starts with its parent's set");
        as_main_pinned_child(&allowed);
        return;
    }
    if allowed.len() < 2 {
        eprintln!("SKIPPED ****** needs two allowed cores (have {allowed:?})");
        return;
    }
    let list: Vec<String> = allowed.iter().map(|c| c.to_string()).collect();
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "pinning::a_main_thread_that_pins_itself_does_not_shrink_the_bus_s_cores",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MAIN_PINNED_CHILD, list.join(","))
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("main-pinned child: all checks passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
