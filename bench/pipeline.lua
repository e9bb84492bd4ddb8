-- HTTP pipelining for wrk, as in the TechEmpower benchmarks:
--   wrk -t1 -c100 -d5s --latency -s bench/pipeline.lua http://127.0.0.1:PORT/ -- 16
-- Each connection writes DEPTH (default 16) copies of the request in one batch and waits for all
-- DEPTH responses before the next batch. wrk counts every response in "requests", so req/s is
-- responses per second; its latency figures are per batch (first byte sent to last response).

init = function(args)
   local depth = tonumber(args[1]) or 16
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format()
   end
   req = table.concat(r)
end

request = function()
   return req
end
