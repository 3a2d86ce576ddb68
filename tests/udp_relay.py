"""A UDP relay between one client and a server on loopback, for the QUIC tests: it keeps what
the client sent before the server's first answer (its first flight: the Initial with the
ClientHello, and any 0-RTT packets), and may drop the server's datagrams that `drop` picks
(by their number, from 1), which then never arrive whatever the load."""

from __future__ import annotations

import select
import socket
import threading


class Relay:
    def __init__(self, server_port, drop=None):
        self.drop = drop
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.connect(("127.0.0.1", server_port))
        self.first_flight: list[bytes] = []
        self.client = None
        self.from_server = 0
        self.dropped = 0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            ready, _, _ = select.select([self.front, self.back], [], [], 0.05)
            for s in ready:
                if s is self.front:
                    d, self.client = self.front.recvfrom(65536)
                    if not self.from_server:
                        self.first_flight.append(d)
                    self.back.send(d)
                    continue
                d = self.back.recv(65536)
                self.from_server += 1
                if self.drop is not None and self.drop(self.from_server):
                    self.dropped += 1
                elif self.client is not None:
                    self.front.sendto(d, self.client)

    def close(self):
        self.stop = True
        self.thread.join()
        self.front.close()
        self.back.close()
