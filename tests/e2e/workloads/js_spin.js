// Two JS functions share the CPU 3:1 (hot: 3 units of work per cold unit), measured by
// the workload itself (process.cpuUsage around each call): the JIT e2e test compares
// the profile's samples of each with these figures. Argument: CPU seconds to run.
// Both call work(), which the test keeps from being inlined (--no-turbo-inlining): a
// sample in work is attributed to its caller only by walking the JIT frames.
//
// The calls come in rounds of a pseudo-random length: hotFunction for 3d of CPU time,
// then coldFunction for d, d from 10 to 50 ms (several samples at 99 Hz). A fixed
// cycle (hot, hot, hot, cold; 2.5 ms on an AMD EPYC) was 1/4.001 of the 99 Hz sampling
// period: every sample fell at nearly the phase of the one before, so the samples saw
// a run of hot or of cold calls for seconds and the sampled ratio swung 1.4x-5.3x. A
// round holds its share of samples but for the one sample at each end that may fall
// either side, and its random length keeps the ends from locking onto the sampler's
// phase.
"use strict";

function work(n) {
  let x = 0;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345 + i) % 2147483647;
  }
  return x;
}

function hotFunction(n) {
  return work(n) + 1;
}

function coldFunction(n) {
  return work(n) + 2;
}

function cpuNs() {
  const u = process.cpuUsage();
  return (u.user + u.system) * 1000;
}

// mulberry32: the same rounds in every run (Math.random would do as well)
let seed = 0x9e3779b9;
function nextRandom() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

const seconds = Number(process.argv[2] || "5");
const unit = 20000;
let hotNs = 0;
let coldNs = 0;
let sink = 0;
const begin = cpuNs();
while (cpuNs() - begin < seconds * 1e9) {
  const d = (10 + 40 * nextRandom()) * 1e6;
  const hotEnd = hotNs + 3 * d;
  const coldEnd = coldNs + d;
  while (hotNs < hotEnd) {
    const t0 = cpuNs();
    sink += hotFunction(unit);
    hotNs += cpuNs() - t0;
  }
  while (coldNs < coldEnd) {
    const t1 = cpuNs();
    sink += coldFunction(unit);
    coldNs += cpuNs() - t1;
  }
}
console.log(`hot_ns ${hotNs} cold_ns ${coldNs} pid ${process.pid} sink ${sink % 10}`);
