// nofp_rust.rs - a Rust release build without frame pointers for the DWARF (.eh_frame) unwinding
// test (tests/integration/test_agent.py, AgentDwarfUnwindTest). Built
// rustc -C opt-level=3 -C debuginfo=1 -C force-frame-pointers=no. Two hot paths, taking turns:
//
//   main (C, from rustc) -> std::rt::lang_start... -> nofp_rust::main -> nofp_rust::rust_loop
//        -> nofp_rust::rust_outer -> nofp_rust::rust_inner
//   ... -> nofp_rust::rust_loop -> nofp_rust::rust_format -> core::fmt (the prebuilt standard
//        library)
//
// Keeps to Rust 1.63 (Debian 12's rustc): std only, no newer syntax or APIs (std::hint::black_box
// is 1.66: the black_box below is a volatile read).
//
//   nofp_rust CPU_SECONDS
//
// It burns CPU_SECONDS of its own CPU time (not wall time).
use std::fmt::Write;

// A value the optimizer cannot see through.
#[inline(always)]
fn black_box<T: Copy>(x: T) -> T {
    unsafe { std::ptr::read_volatile(&x) }
}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn cpu_now() -> f64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

// The leaf: a 64-word table indexed by data, so it stays on the stack.
#[inline(never)]
fn rust_inner(seed: u64, rounds: u32) -> u64 {
    let mut table = [0u64; 64];
    for (i, t) in table.iter_mut().enumerate() {
        *t = black_box(seed.wrapping_mul(2 * i as u64 + 1) ^ (seed >> (i % 17)));
    }
    let mut h = seed;
    for _ in 0..rounds {
        h = h.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        table[(h >> 58) as usize] ^= h;
        h ^= table[((h >> 40) & 63) as usize];
    }
    black_box(h ^ table[(h & 63) as usize])
}

#[inline(never)]
fn rust_outer(seed: u64, rounds: u32) -> u64 {
    let mut acc = [0u64; 8];
    for i in 0..8 {
        let prev = if i > 0 { acc[i - 1] >> 3 } else { 0 };
        acc[i] = rust_inner(black_box(seed + i as u64), rounds) ^ prev;
    }
    acc.iter().fold(seed, |r, a| r.wrapping_mul(31).wrapping_add(*a))
}

// Time in the standard library's formatting (core::fmt, prebuilt without frame pointers).
#[inline(never)]
fn rust_format(seed: u64, n: u32) -> u64 {
    let mut total = 0u64;
    let mut s = String::with_capacity(128);
    for i in 0..n {
        s.clear();
        let x = black_box(seed.wrapping_add(i as u64));
        write!(s, "{} {:.9} {:x}", x, x as f64 / 7.0, x.wrapping_mul(31)).unwrap();
        total = total.wrapping_add(s.len() as u64 + s.as_bytes()[s.len() / 2] as u64);
    }
    black_box(total)
}

// Not main itself: std's lang_start may inline main into its closure.
#[inline(never)]
fn rust_loop(seconds: f64) -> u64 {
    let until = cpu_now() + seconds;
    let mut r: u64 = 1;
    while cpu_now() < until {
        r = r.wrapping_add(rust_outer(r, 16000));
        r = r.wrapping_add(rust_format(r, 2000));
    }
    black_box(r)
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    println!("{}", rust_loop(seconds));
}
