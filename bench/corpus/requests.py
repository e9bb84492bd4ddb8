"""The fixed corpus of bench/parser.py: realistic HTTP/1.1 request heads and bodies, in four groups.

Every byte a parser sees is spelled out below (``CRLF`` line ends, added by ``_head``), so the
corpus is the same on every run and every machine. The corpus is a list of *connections*: each
is the list of reads a server would get from one socket (``reads``, fed to the parser one at a
time, draining its events after each) and the requests it must yield (``requests``, for the
benchmark's checks: method, target, number of header fields and decoded body of each).

Groups:

- ``browser``: GET navigations and sub-resource loads from Chrome 124 (Windows), Firefox 126
  (Linux) and Chrome 124 (Android) with their usual headers, cookies included; 500 to 900 bytes
  each, one request per read, several requests per keep-alive connection.
- ``api``: POST/PUT/PATCH requests with small JSON bodies and a Content-Length, from
  python-requests, a browser ``fetch()`` and a Go service; the head and body in one read.
- ``chunked``: ``Transfer-Encoding: chunked`` uploads (curl streaming NDJSON, a Node client), the
  body arriving in a second read after the head and its first chunk.
- ``pipelined``: 16 requests in one read, as wrk's pipelining script sends them: TechEmpower's
  plaintext request 16 times, and a mix of 12 API GETs and 4 JSON POSTs.
"""

CRLF = b"\r\n"


class Req:
    """One request: its raw bytes and what a parser must make of them."""

    __slots__ = ("method", "target", "raw", "body", "nheaders")

    def __init__(self, method, target, raw, body, nheaders):
        self.method = method
        self.target = target
        self.raw = raw
        self.body = body  # the body as the application reads it (chunked framing removed)
        self.nheaders = nheaders


class Conn:
    """One connection: the reads a server gets, in order, and the requests they hold."""

    __slots__ = ("name", "reads", "requests")

    def __init__(self, name, reads, requests):
        self.name = name
        self.reads = reads
        self.requests = requests
        assert b"".join(reads) == b"".join(r.raw for r in requests), name

    @property
    def size(self):
        return sum(len(r) for r in self.reads)


def _head(request_line, fields):
    return "\r\n".join([request_line] + fields + ["", ""]).encode("latin-1")


def req(request_line, fields, body=b""):
    """A request with no body, or with a Content-Length body (the field must be in ``fields``)."""
    method, target, _ = request_line.split(" ")
    lengths = [f.split(":", 1)[1].strip() for f in fields if f.lower().startswith("content-length:")]
    assert lengths == ([str(len(body))] if body else []), (request_line, lengths, len(body))
    return Req(method, target, _head(request_line, fields) + body, body, len(fields))


def chunked_req(request_line, fields, chunks):
    """A chunked request; ``raw`` holds the framed body, ``body`` the chunks joined."""
    method, target, _ = request_line.split(" ")
    assert any(f.lower() == "transfer-encoding: chunked" for f in fields)
    framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    return Req(method, target, _head(request_line, fields) + framed, b"".join(chunks), len(fields))


def one_read_each(name, requests):
    return Conn(name, [r.raw for r in requests], requests)


# --- browser --------------------------------------------------------------------------------------

CHROME_UA = (
    "User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36"
)
CHROME_CH = [
    'sec-ch-ua: "Chromium";v="124", "Google Chrome";v="124", "Not-A.Brand";v="99"',
    "sec-ch-ua-mobile: ?0",
    'sec-ch-ua-platform: "Windows"',
]
SHOP_COOKIE = (
    "Cookie: sessionid=ujzde8gxd6ncf10epf91dhodzdoc9is0; "
    "csrftoken=jIhKtJ0RlgLKOmxgJTeKdNnFRIBXuDL7DxtpYlSXpfKtHF4vUCsMehGAkWvj7FAc; "
    "_ga=GA1.1.8809768138.1714356644"
)

chrome_shop = one_read_each(
    "chrome-shop",
    [
        req(
            "GET /products/running-shoes?color=blue&size=42 HTTP/1.1",
            [
                "Host: shop.example.com",
                "Connection: keep-alive",
                *CHROME_CH,
                "Upgrade-Insecure-Requests: 1",
                CHROME_UA,
                "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
                "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-Mode: navigate",
                "Sec-Fetch-User: ?1",
                "Sec-Fetch-Dest: document",
                "Referer: https://shop.example.com/",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: en-US,en;q=0.9",
                SHOP_COOKIE,
            ],
        ),
        req(
            "GET /static/css/main.4f1c2a9e.css HTTP/1.1",
            [
                "Host: shop.example.com",
                "Connection: keep-alive",
                *CHROME_CH,
                CHROME_UA,
                "Accept: text/css,*/*;q=0.1",
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-Mode: no-cors",
                "Sec-Fetch-Dest: style",
                "Referer: https://shop.example.com/products/running-shoes?color=blue&size=42",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: en-US,en;q=0.9",
                SHOP_COOKIE,
            ],
        ),
        req(
            "GET /media/catalog/shoes/ax-200-blue-800x800.webp HTTP/1.1",
            [
                "Host: shop.example.com",
                "Connection: keep-alive",
                *CHROME_CH,
                CHROME_UA,
                "Accept: image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8",
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-Mode: no-cors",
                "Sec-Fetch-Dest: image",
                "Referer: https://shop.example.com/products/running-shoes?color=blue&size=42",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: en-US,en;q=0.9",
                SHOP_COOKIE,
            ],
        ),
        req(
            "GET /api/cart/summary?currency=EUR HTTP/1.1",
            [
                "Host: shop.example.com",
                "Connection: keep-alive",
                *CHROME_CH,
                "Accept: application/json, text/plain, */*",
                "X-Requested-With: XMLHttpRequest",
                CHROME_UA,
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-Mode: cors",
                "Sec-Fetch-Dest: empty",
                "Referer: https://shop.example.com/products/running-shoes?color=blue&size=42",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: en-US,en;q=0.9",
                SHOP_COOKIE,
            ],
        ),
    ],
)

FIREFOX_UA = "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:126.0) Gecko/20100101 Firefox/126.0"
BLOG_COOKIE = (
    "Cookie: wp-settings-time-1=1716367188; _pk_id.1.1fff=ebb2737f6a6f0fb2.1714356644.; "
    "_pk_ses.1.1fff=1; theme=dark; cf_clearance=_6ilI8ihN5KXSc7Tvo_hBKqFYY_kv5ZJr3J1TWDtkwt-1716243224-"
    "1.0.1.1-Db.xHKas1VOqg6YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8po.799NksnRH9ucAUsdMlHUvTCQCyEZDz_TddJ8HyS"
)

firefox_blog = one_read_each(
    "firefox-blog",
    [
        req(
            "GET /blog/2024/05/strict-http-parsing-and-request-smuggling/ HTTP/1.1",
            [
                "Host: www.example.org",
                FIREFOX_UA,
                "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
                "Accept-Language: en-GB,en;q=0.5",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Referer: https://www.example.org/blog/",
                "Connection: keep-alive",
                BLOG_COOKIE,
                "Upgrade-Insecure-Requests: 1",
                "Sec-Fetch-Dest: document",
                "Sec-Fetch-Mode: navigate",
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-User: ?1",
                'If-None-Match: W/"5e1f-ObOIRpFqaDZeV7G5IfQHeVVEqZe"',
                "Priority: u=0, i",
            ],
        ),
        req(
            "GET /wp-content/themes/minimal/assets/js/main.min.js?ver=6.5.3 HTTP/1.1",
            [
                "Host: www.example.org",
                FIREFOX_UA,
                "Accept: */*",
                "Accept-Language: en-GB,en;q=0.5",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Referer: https://www.example.org/blog/2024/05/strict-http-parsing-and-request-smuggling/",
                "Connection: keep-alive",
                BLOG_COOKIE,
                "Sec-Fetch-Dest: script",
                "Sec-Fetch-Mode: no-cors",
                "Sec-Fetch-Site: same-origin",
                "If-Modified-Since: Tue, 21 May 2024 08:12:44 GMT",
                "Priority: u=2",
            ],
        ),
        req(
            "GET /favicon.ico HTTP/1.1",
            [
                "Host: www.example.org",
                FIREFOX_UA,
                "Accept: image/avif,image/webp,*/*",
                "Accept-Language: en-GB,en;q=0.5",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Connection: keep-alive",
                "Referer: https://www.example.org/blog/2024/05/strict-http-parsing-and-request-smuggling/",
                BLOG_COOKIE,
                "Sec-Fetch-Dest: image",
                "Sec-Fetch-Mode: no-cors",
                "Sec-Fetch-Site: same-origin",
                "Priority: u=6",
            ],
        ),
    ],
)

ANDROID_UA = (
    "User-Agent: Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Mobile Safari/537.36"
)
NEWS_COOKIE = (
    "Cookie: consent=v2:analytics=0,ads=0; uid=4e4fb440-034d-6608-697a-8d41bed440e5; "
    "_fbp=fb.1.1716908529068.2140563900; region=eu-west; ab_bucket=17"
)

android_news = one_read_each(
    "android-news",
    [
        req(
            "GET /world/europe/2024/05/28/markets-open-higher?utm_source=newsletter HTTP/1.1",
            [
                "Host: news.example.net",
                "Connection: keep-alive",
                'sec-ch-ua: "Chromium";v="124", "Android WebView";v="124", "Not-A.Brand";v="99"',
                "sec-ch-ua-mobile: ?1",
                'sec-ch-ua-platform: "Android"',
                "Upgrade-Insecure-Requests: 1",
                ANDROID_UA,
                "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
                "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
                "Sec-Fetch-Site: none",
                "Sec-Fetch-Mode: navigate",
                "Sec-Fetch-User: ?1",
                "Sec-Fetch-Dest: document",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: de-DE,de;q=0.9,en;q=0.8",
                NEWS_COOKIE,
            ],
        ),
        req(
            "GET /assets/fonts/sourceserif4-regular.woff2 HTTP/1.1",
            [
                "Host: news.example.net",
                "Connection: keep-alive",
                "Origin: https://news.example.net",
                'sec-ch-ua: "Chromium";v="124", "Android WebView";v="124", "Not-A.Brand";v="99"',
                "sec-ch-ua-mobile: ?1",
                'sec-ch-ua-platform: "Android"',
                ANDROID_UA,
                "Accept: */*",
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-Mode: cors",
                "Sec-Fetch-Dest: font",
                "Referer: https://news.example.net/assets/css/site.css",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: de-DE,de;q=0.9,en;q=0.8",
                NEWS_COOKIE,
            ],
        ),
    ],
)

# --- api ------------------------------------------------------------------------------------------

ORDER_JSON = (
    b'{"customer_id":48213,"currency":"EUR","items":[{"sku":"AX-200-BLU-42","qty":1,"price":"89.90"},'
    b'{"sku":"SOCK-3P-M","qty":2,"price":"9.50"}],"shipping":{"method":"standard","country":"FR"},'
    b'"coupon":null}'
)
STATUS_JSON = b'{"status":"paid","payment_ref":"pi_3PLm2kJ9x7QwZb1c0aB4dE6f","paid_at":"2024-05-28T09:14:03Z"}'

python_client = one_read_each(
    "python-requests",
    [
        req(
            "POST /api/v1/orders HTTP/1.1",
            [
                "Host: api.example.com",
                "User-Agent: python-requests/2.32.3",
                "Accept-Encoding: gzip, deflate",
                "Accept: application/json",
                "Connection: keep-alive",
                "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.E2jBMptUsGr7CmY-uCu3ZR1zTOlUcR64cXQ"
                "LioDnkHIfxIq2HZt_PlJhx2jIclHkCiHp6bR1IqfEouHgxzNNAL5wIScGebcy8F5n3_YNBDRzrZSgqbjG3uhkWKFLf6xuI5a"
                "HUQPFeNBT.xaQWk8JzFalHlsZfYcMMDktXP_tKsf2rcDkdfrUnW5g",
                "Content-Type: application/json",
                "Content-Length: %d" % len(ORDER_JSON),
            ],
            ORDER_JSON,
        ),
        req(
            "PATCH /api/v1/orders/99120471 HTTP/1.1",
            [
                "Host: api.example.com",
                "User-Agent: python-requests/2.32.3",
                "Accept-Encoding: gzip, deflate",
                "Accept: application/json",
                "Connection: keep-alive",
                "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.E2jBMptUsGr7CmY-uCu3ZR1zTOlUcR64cXQ"
                "LioDnkHIfxIq2HZt_PlJhx2jIclHkCiHp6bR1IqfEouHgxzNNAL5wIScGebcy8F5n3_YNBDRzrZSgqbjG3uhkWKFLf6xuI5a"
                "HUQPFeNBT.xaQWk8JzFalHlsZfYcMMDktXP_tKsf2rcDkdfrUnW5g",
                "Content-Type: application/json",
                "Content-Length: %d" % len(STATUS_JSON),
            ],
            STATUS_JSON,
        ),
    ],
)

COMMENT_JSON = b'{"post_id":7731,"parent_id":null,"body":"Thanks, this cleared up the CL.TE case for me.","notify":true}'

browser_fetch = one_read_each(
    "chrome-fetch",
    [
        req(
            "POST /api/comments HTTP/1.1",
            [
                "Host: www.example.org",
                "Connection: keep-alive",
                "Content-Length: %d" % len(COMMENT_JSON),
                *CHROME_CH,
                "X-CSRFToken: jIhKtJ0RlgLKOmxgJTeKdNnFRIBXuDL7DxtpYlSXpfKtHF4vUCsMehGAkWvj7FAc",
                CHROME_UA,
                "Content-Type: application/json",
                "Accept: application/json",
                "Origin: https://www.example.org",
                "Sec-Fetch-Site: same-origin",
                "Sec-Fetch-Mode: cors",
                "Sec-Fetch-Dest: empty",
                "Referer: https://www.example.org/blog/2024/05/strict-http-parsing-and-request-smuggling/",
                "Accept-Encoding: gzip, deflate, br, zstd",
                "Accept-Language: en-US,en;q=0.9",
                SHOP_COOKIE,
            ],
            COMMENT_JSON,
        ),
    ],
)

EVENT_JSON = (
    b'{"type":"user.signed_in","user_id":"ebb2737f-6a6f-0fb2-3c6f-5da2cec25540","ip":"203.0.113.42",'
    b'"ts":1716887643123}'
)
PROFILE_JSON = b'{"display_name":"Ada L.","locale":"en-GB","timezone":"Europe/London","newsletter":false}'

go_service = one_read_each(
    "go-service",
    [
        req(
            "POST /v1/events HTTP/1.1",
            [
                "Host: events.internal:8080",
                "User-Agent: Go-http-client/1.1",
                "Content-Length: %d" % len(EVENT_JSON),
                "Accept: application/json",
                "Content-Type: application/json",
                "Traceparent: 00-67efc2f91624a8940f1f836f99eee369-2f09e2e8c662248b-01",
                "X-Api-Key: iM0OGr4hTxoF54Fzbka8FRCztUjAwyuh1vauWv1z",
                "Accept-Encoding: gzip",
            ],
            EVENT_JSON,
        ),
        req(
            "PUT /v1/users/ebb2737f-6a6f-0fb2-3c6f-5da2cec25540/profile HTTP/1.1",
            [
                "Host: events.internal:8080",
                "User-Agent: Go-http-client/1.1",
                "Content-Length: %d" % len(PROFILE_JSON),
                "Accept: application/json",
                "Content-Type: application/json",
                "Traceparent: 00-67efc2f91624a8940f1f836f99eee369-9a1b3c5d7e9f0a2b-01",
                "X-Api-Key: iM0OGr4hTxoF54Fzbka8FRCztUjAwyuh1vauWv1z",
                "Accept-Encoding: gzip",
            ],
            PROFILE_JSON,
        ),
    ],
)

# --- chunked --------------------------------------------------------------------------------------


def _split_after_first_chunk(r, first_chunk):
    """Two reads: the head with the first chunk (size line, data, CRLF), then the rest of the body."""
    cut = r.raw.index(b"\r\n\r\n") + 4 + len(b"%x\r\n%s\r\n" % (len(first_chunk), first_chunk))
    return [r.raw[:cut], r.raw[cut:]]


NDJSON = [
    b'{"ts":"2024-05-28T09:14:03.112Z","level":"info","msg":"request","path":"/api/v1/orders","status":201,"ms":12}\n',
    b'{"ts":"2024-05-28T09:14:03.418Z","level":"warn","msg":"slow query","table":"orders","ms":312}\n'
    b'{"ts":"2024-05-28T09:14:04.001Z","level":"info","msg":"request","path":"/healthz","status":200,"ms":1}\n',
    b'{"ts":"2024-05-28T09:14:04.377Z","level":"error","msg":"upstream timeout","upstream":"payments","ms":5000}\n',
]
curl_upload = chunked_req(
    "POST /ingest/logs?source=web-3 HTTP/1.1",
    [
        "Host: logs.example.com",
        "User-Agent: curl/8.5.0",
        "Accept: */*",
        "Content-Type: application/x-ndjson",
        "Authorization: Basic aW5nZXN0OnM0bXBsZS1wYXNzd29yZA==",
        "Transfer-Encoding: chunked",
    ],
    NDJSON,
)
CSV = [
    b"id,email,plan,created_at\r\n1001,ada@example.com,pro,2024-05-01\r\n",
    b"1002,grace@example.com,free,2024-05-03\r\n1003,linus@example.com,team,2024-05-07\r\n",
]
node_upload = chunked_req(
    "PUT /v2/imports/customers.csv HTTP/1.1",
    [
        "host: api.example.com",
        "user-agent: node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
        "accept: */*",
        "content-type: text/csv",
        "authorization: Bearer iM0OGr4hTxoF54Fzbka8FRCztUjAwyuh1vauWv1z",
        "transfer-encoding: chunked",
        "connection: keep-alive",
    ],
    CSV,
)
curl_chunked = Conn("curl-chunked", _split_after_first_chunk(curl_upload, NDJSON[0]), [curl_upload])
node_chunked = Conn("node-chunked", _split_after_first_chunk(node_upload, CSV[0]), [node_upload])

# --- pipelined ------------------------------------------------------------------------------------

# TechEmpower's plaintext test, pipelined 16 deep (its wrk script sends exactly this request).
TFB = req(
    "GET /plaintext HTTP/1.1",
    [
        "Host: tfb-server:8080",
        "Accept: text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7",
        "Connection: keep-alive",
    ],
)
tfb_pipeline = Conn("tfb-plaintext-x16", [TFB.raw * 16], [TFB] * 16)


def _api_mix():
    requests = []
    for i in range(16):
        if i % 4 == 3:
            body = b'{"item_id":%d,"qty":%d,"note":"pipelined write"}' % (5000 + i, i % 3 + 1)
            requests.append(
                req(
                    "POST /api/v1/cart/items HTTP/1.1",
                    [
                        "Host: api.example.com",
                        "User-Agent: wrk/4.1.0",
                        "Accept: application/json",
                        "Content-Type: application/json",
                        "Content-Length: %d" % len(body),
                    ],
                    body,
                )
            )
        else:
            requests.append(
                req(
                    "GET /api/v1/items/%d?fields=id,name,price,stock HTTP/1.1" % (5000 + i),
                    [
                        "Host: api.example.com",
                        "User-Agent: wrk/4.1.0",
                        "Accept: application/json",
                        "Accept-Encoding: gzip",
                    ],
                )
            )
    return Conn("api-mix-x16", [b"".join(r.raw for r in requests)], requests)


api_pipeline = _api_mix()

GROUPS = {
    "browser": [chrome_shop, firefox_blog, android_news],
    "api": [python_client, browser_fetch, go_service],
    "chunked": [curl_chunked, node_chunked],
    "pipelined": [tfb_pipeline, api_pipeline],
}
