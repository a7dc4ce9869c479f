//! CPU contention for timing tests: busy-looping processes, one per CPU
//! and more, pinned round-robin to the CPUs and started inside the test's
//! host namespaces (a network namespace does not isolate CPU: they compete
//! with every process of the machine, the nodes' executors, their daemons
//! and the S3 server). A thread of the load's own stops and resumes them in
//! seeded bursts of 0.2-1.5 s, so that the contention comes and goes, as it
//! does on a busy host, instead of being a constant the timings absorb.
//! Dropped: the burners are killed.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub struct Load {
    burners: Arc<Mutex<Vec<Child>>>,
    stop: Arc<AtomicBool>,
    toggler: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    /// `n` burners, the i-th pinned to CPU `i % cpus` and started in
    /// namespace `namespaces[i % len]`.
    pub fn start(n: usize, namespaces: &[String], seed: u64) -> Load {
        let cpus = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
        let mut burners = vec![];
        for i in 0..n {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &(i % cpus).to_string(), "sh", "-c", "while :; do :; done"]);
            if !namespaces.is_empty() {
                super::netns::Net::enter(&mut cmd, &namespaces[i % namespaces.len()]);
            }
            let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).spawn().expect("start a CPU burner");
            burners.push(child);
        }
        let burners = Arc::new(Mutex::new(burners));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (burners.clone(), stop.clone());
        let toggler = std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            while !s.load(Ordering::Relaxed) {
                for c in b.lock().unwrap().iter() {
                    // Most of the time most of them burn.
                    let sig = if rng.random_range(0..4) == 0 { libc::SIGSTOP } else { libc::SIGCONT };
                    unsafe { libc::kill(c.id() as i32, sig) };
                }
                std::thread::sleep(Duration::from_millis(rng.random_range(200..=1500)));
            }
        });
        Load { burners, stop, toggler: Some(toggler) }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.toggler.take() {
            let _ = t.join();
        }
        for c in self.burners.lock().unwrap().iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
