#!/usr/bin/env python3
"""Test helper for tests/data/download_test.cpp: a static HTTP server on 127.0.0.1 (free port) with
HTTP Range support and injectable failures. Python 3 standard library only.

usage: range_http_server.py ROOT PORT_FILE LOG_FILE [--fail-first N] [--drop-after BYTES]
                            [--no-range] [--lifetime SECONDS] [--full-paths]
  ROOT         directory served (GET /NAME -> ROOT/NAME; missing -> 404)
  --full-paths        serve GET /A/B/C from ROOT/A/B/C instead of ROOT/C (a hub-like tree)
  PORT_FILE    the chosen port is written here (atomically) once the server listens
  LOG_FILE     one line per request: "GET /NAME range=<Range header or ->" (flushed at once)
  --fail-first N      answer the first N requests of every path with 503
  --drop-after BYTES  on the first successful request of every path, send only BYTES of the body
                      and close the connection (a broken transfer)
  --no-range          ignore Range headers (always 200 + the whole file)
  --lifetime SECONDS  exit after this long (default 60), so the server never outlives a test
"""
import http.server
import os
import sys
import threading

args = sys.argv[1:]
root, port_file, log_file = os.path.abspath(args[0]), args[1], args[2]
opts = {'--fail-first': 0, '--drop-after': -1, '--lifetime': 60.0}
no_range = '--no-range' in args
full_paths = '--full-paths' in args
for k in list(opts):
    if k in args:
        opts[k] = type(opts[k])(args[args.index(k) + 1])
counts, lock = {}, threading.Lock()
log = open(log_file, 'a', buffering=1)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *a):
        pass

    def do_GET(self):
        rng = self.headers.get('Range')
        log.write(f'GET {self.path} range={rng or "-"}\n')
        with lock:
            n = counts[self.path] = counts.get(self.path, 0) + 1
        if n <= opts['--fail-first']:
            return self.reply(503, b'busy')
        if full_paths:
            path = os.path.normpath(os.path.join(root, self.path.lstrip('/')))
            if not path.startswith(os.path.abspath(root) + os.sep):
                return self.reply(404, b'outside the root')
        else:
            path = os.path.join(root, os.path.basename(self.path))
        if not os.path.isfile(path):
            return self.reply(404, b'not found')
        data = open(path, 'rb').read()
        start = 0
        if rng and not no_range and rng.startswith('bytes=') and rng.endswith('-'):
            start = int(rng[6:-1])
            if start >= len(data):
                return self.reply(416, b'', {'Content-Range': f'bytes */{len(data)}'})
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Accept-Ranges', 'bytes')
        if start:
            self.send_header('Content-Range', f'bytes {start}-{len(data) - 1}/{len(data)}')
        self.end_headers()
        drop = opts['--drop-after']
        if drop >= 0 and n == opts['--fail-first'] + 1 and drop < len(body):
            self.wfile.write(body[:drop])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)

    def reply(self, code, body, headers=None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)


server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
with open(port_file + '.part', 'w') as f:
    f.write(str(server.server_address[1]))
os.replace(port_file + '.part', port_file)
threading.Timer(opts['--lifetime'], server.shutdown).start()
server.serve_forever()
