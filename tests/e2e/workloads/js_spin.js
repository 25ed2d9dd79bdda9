// Two JS functions share the CPU 3:1 (hot: 3 units of work per cold unit), measured by
// the workload itself (process.cpuUsage around each call): the JIT e2e test compares
// the profile's samples of each with these figures. Argument: CPU seconds to run.
// Both call work(), which the test keeps from being inlined (--no-turbo-inlining): a
// sample in work is attributed to its caller only by walking the JIT frames.
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

const seconds = Number(process.argv[2] || "5");
const unit = 20000;
let hotNs = 0;
let coldNs = 0;
let sink = 0;
const begin = cpuNs();
while (cpuNs() - begin < seconds * 1e9) {
  for (let k = 0; k < 3; k++) {
    const t0 = cpuNs();
    sink += hotFunction(unit);
    hotNs += cpuNs() - t0;
  }
  const t1 = cpuNs();
  sink += coldFunction(unit);
  coldNs += cpuNs() - t1;
}
console.log(`hot_ns ${hotNs} cold_ns ${coldNs} pid ${process.pid} sink ${sink % 10}`);
