# runtime-stat's Ruby workload: N calls of f and N objects, 3 collections, then it stays
# alive for SLEEP seconds (so an interval ends while it runs). Ruby 3.1 fires
# method__entry only while a TracePoint is on, hence the one below.
# Usage: ruby stat_workload.rb N SLEEP
TracePoint.new(:call) {}.enable
def f(i)
  i + 1
end

n = ARGV[0].to_i
i = 0
while i < n
  f(i)
  Object.new
  i += 1
end
3.times { GC.start }
sleep ARGV[1].to_f
