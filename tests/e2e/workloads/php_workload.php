<?php
// Workload of the php-* plan tests, with known calls and depths.
//
//   USE_ZEND_DTRACE=1 php8.2 php_workload.php calls    # fib(15): 1973 calls; Greeter->hello x300, Greeter::wave x200
//   USE_ZEND_DTRACE=1 php8.2 php_workload.php latency  # nap(4): 5 nested calls, each sleeping NAP_US then
//                                                      # recursing; prints "nap DEPTH INNER OUTER" per call:
//                                                      # ns inside it, and from before its call to after
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
$outer = [];  // depth => ns from before the call to after its return
function nap($n) {
    global $naps, $outer;
    $t0 = hrtime(true);
    usleep(NAP_US);
    if ($n > 0) {
        $t1 = hrtime(true);
        nap($n - 1);
        $outer[4 - ($n - 1)] = hrtime(true) - $t1;
    }
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
    $t0 = hrtime(true);
    nap(4);
    $outer[0] = hrtime(true) - $t0;
    foreach ($naps as [$depth, $ns]) { echo "nap $depth $ns {$outer[$depth]}\n"; }
    break;
case "flow":
    top();
    break;
}
