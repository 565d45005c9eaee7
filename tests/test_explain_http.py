"""explain --serve's HTTP side without a browser: a browser that leaves before its answer is written
(a reload, a closed tab) costs the server nothing and prints nothing."""

from __future__ import annotations

import socket
import struct
import threading

from minibroker.tools.explain import ExplainServer


def test_a_client_gone_before_the_answer_prints_no_traceback(tmp_path, capfd):
    server = ExplainServer(str(tmp_path))
    gone = threading.Event()
    answered = threading.Event()

    def answer_after_the_client_left(path: str):
        gone.wait(10)
        answered.set()
        return 200, "text/html; charset=utf-8", b"x" * (4 << 20)  # more than any socket buffer holds

    server.answer = answer_after_the_client_left
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            # close with a reset: the server's write then fails at once (EPIPE or ECONNRESET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.set()
        assert answered.wait(10)
        # the server still answers the next client
        server.answer = lambda path: (200, "text/plain", b"still here")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        assert reply.endswith(b"still here")
    finally:
        server.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Broken pipe" not in err, err
