-- POSTs a 64 KiB body to /upload (the app reads it all and answers its length):
--   wrk -t1 -c50 -d5s --latency -s bench/upload.lua http://127.0.0.1:PORT/upload
wrk.method = "POST"
wrk.body = string.rep("x", 65536)
wrk.headers["Content-Type"] = "application/octet-stream"
