<?php
// runtime-stat's PHP workload: N calls of f, then it stays alive for SLEEP seconds (so an
// interval ends while it runs). Usage: USE_ZEND_DTRACE=1 php stat_workload.php N SLEEP
function f($i) { return $i + 1; }
$n = (int)$argv[1];
for ($i = 0; $i < $n; $i++) {
    f($i);
}
usleep((int)((float)$argv[2] * 1000000));
