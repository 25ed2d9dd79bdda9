<?php
// Workload of the php-* plan tests, with known calls and depths.
//
//   USE_ZEND_DTRACE=1 php8.2 php_workload.php calls    # fib(15): 1973 calls; Greeter->hello x300, Greeter::wave x200
//   USE_ZEND_DTRACE=1 php8.2 php_workload.php latency  # nap(4): 5 nested calls, each sleeping NAP_US then
//                                                      # recursing; prints "nap DEPTH NS" per call, as measured here
//   USE_ZEND_DTRACE=1 php8.2 php_workload.php flow     # top -> middle x2 -> leaf x2 each
//
// PHP fires its php:* probes only when started with USE_ZEND_DTRACE=1 in its
// environment, and function__entry/return only for functions written in PHP.

const NAP_US = 10000;

function fib($n) { return $n < 2 ? $n : fib($n - 1) + fib($n - 2); }

class Greeter {
    public function hello($i) { return $i + 1; }
    public static function wave($i) { return $i * 2; }
}

$naps = [];
function nap($n) {
    global $naps;
    $t0 = hrtime(true);
    usleep(NAP_US);
    if ($n > 0) { nap($n - 1); }
    $naps[] = [4 - $n, hrtime(true) - $t0];
}

function leaf($x) { return $x + 1; }
function middle($x) { return leaf($x) + leaf($x); }
function top() { return middle(1) + middle(2); }

switch ($argv[1]) {
case "calls":
    fib(15);
    $g = new Greeter();
    for ($i = 0; $i < 300; $i++) { $g->hello($i); }
    for ($i = 0; $i < 200; $i++) { Greeter::wave($i); }
    break;
case "latency":
    nap(4);
    foreach ($naps as [$depth, $ns]) { echo "nap $depth $ns\n"; }
    break;
case "flow":
    top();
    break;
}
