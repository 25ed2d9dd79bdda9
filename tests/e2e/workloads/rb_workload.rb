# Workload of the ruby-* plan tests, with known calls, depths, allocations and GCs.
#
#   ruby3.1 rb_workload.rb calls    # fib(15): 1973 calls of Object#fib; Greeter#hello x300, Greeter#wave x200
#   ruby3.1 rb_workload.rb latency  # nap(4): 5 nested calls, each sleeping NAP_S then recursing;
#                                   # prints "nap DEPTH INNER OUTER" per call: ns inside it,
#                                   # and from before its call to after its return
#   ruby3.1 rb_workload.rb flow     # top -> middle x2 -> leaf x2 each
#   ruby3.1 rb_workload.rb gc       # GC disabled, GC.start x3; prints "gc COUNT" (GC.count)
#   ruby3.1 rb_workload.rb objnew   # Widget.new x1000, [i, i, i] x300, {a: i, b: i} x200,
#                                   # a 100-byte string literal x4000
#   ruby3.1 rb_workload.rb threads  # 3 threads named rb-worker-1..3; prints "thread NAME TID NS"
#                                   # (NS: around its Thread.new)
#
# Ruby 3.1 fires ruby:method__entry/return only while a TracePoint is active: every mode
# but gc and objnew enables one (its block is a block, not a method: it fires nothing).

NAP_S = 0.01

def fib(n)
  n < 2 ? n : fib(n - 1) + fib(n - 2)
end

class Greeter
  def hello(i) = i + 1
  def wave(i) = i * 2
end

def nap(n)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  sleep(NAP_S)
  if n > 0 # the inner call timed from here too: from before it to after its return
    t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    nap(n - 1)
    $outer[4 - (n - 1)] = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t1
  end
  took = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t0
  $naps << [4 - n, took]
end

def leaf(x) = x + 1
def middle(x) = leaf(x) + leaf(x)
def top = middle(1) + middle(2)

class Widget
  def initialize(i)
    @i = i
  end
end

def traced
  tp = TracePoint.new(:call, :return) {}
  tp.enable
  yield
ensure
  tp.disable
end

def run_calls
  traced do
    fib(15)
    g = Greeter.new
    300.times { |i| g.hello(i) }
    200.times { |i| g.wave(i) }
  end
end

def run_latency
  $naps = []
  $outer = {}
  traced do
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    nap(4)
    $outer[0] = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t0
  end
  $naps.each { |depth, ns| puts "nap #{depth} #{ns} #{$outer[depth]}" }
end

def run_flow
  traced { top }
end

def run_gc
  GC.disable
  3.times { GC.start }
  puts "gc #{GC.count}"
end

def run_objnew
  kept = []
  1000.times { |i| kept << Widget.new(i) }
  300.times { |i| kept << [i, i, i] }
  200.times { |i| kept << { a: i, b: i } }
  4000.times { kept << "1234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890" }
  kept.size
end

def run_threads
  gate = Queue.new
  around = {} # ns around each Thread.new: its pthread_create and clone lie inside
  threads = (1..3).map do |i|
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
    t = Thread.new { gate.pop && Thread.current.native_thread_id }
    around[t] = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - t0
    t.name = "rb-worker-#{i}" # an OS thread name too (pthread_setname_np)
    t
  end
  3.times { gate << :go }
  threads.each { |t| puts "thread #{t.name} #{t.value} #{around[t]}" }
end

send("run_#{ARGV[0]}")
