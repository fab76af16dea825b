#!/usr/bin/env python3
"""Writes the weak-key fixtures of acme-jose's goodkey tests and the weak-key HTTP tests.

Run from this directory: python3 make.py (needs the openssl command for the good key and to
convert PKCS#1 to PKCS#8). Every key here is deliberately weak or throwaway: none guards anything.

- rsa-good.pem              an ordinary RSA 2048 key (openssl genpkey): passes every check
- rsa-close-primes.key.pem  RSA 2048 whose primes differ by less than 2^520: Fermat's method
                            factors it in its first round (private key, so a test can sign a CSR)
- rsa-small-prime.pub.pem   a 2048-bit modulus 751 * m, exponent 65537: divisible by a small prime
- rsa-exponent-3.pub.pem    the good key's modulus with exponent 3
- roca.hex                  see README.md (a published ROCA test modulus, not made here)
"""
import base64
import random
import subprocess

rng = random.Random(20261128)


def is_probable_prime(n, rounds=40):
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for _ in range(rounds):
        a = rng.randrange(2, n - 2)
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def next_prime(n):
    n |= 1
    while not is_probable_prime(n):
        n += 2
    return n


def der_len(n):
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def tlv(tag, body):
    return bytes([tag]) + der_len(len(body)) + body


def der_int(v):
    body = v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
    return tlv(0x02, body)


def pem(label, der):
    b64 = base64.b64encode(der).decode()
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


RSA_ALG = tlv(0x30, tlv(0x06, bytes.fromhex("2a864886f70d010101")) + b"\x05\x00")


def spki(n, e):
    key = tlv(0x30, der_int(n) + der_int(e))
    return tlv(0x30, RSA_ALG + tlv(0x03, b"\x00" + key))


def write(name, text):
    with open(name, "w") as f:
        f.write(text)


# Close primes: q is the first prime after p + 2^500, both 1024 bits, n exactly 2048 bits.
e = 65537
while True:
    p = next_prime(rng.getrandbits(1024) | (3 << 1022))
    q = next_prime(p + (1 << 500))
    n = p * q
    phi = (p - 1) * (q - 1)
    if n.bit_length() == 2048 and phi % e != 0:
        break
d = pow(e, -1, phi)
pkcs1 = tlv(0x30, b"".join(der_int(v) for v in (0, n, e, d, p, q, d % (p - 1), d % (q - 1), pow(q, -1, p))))
write("close.pkcs1.pem", pem("RSA PRIVATE KEY", pkcs1))
subprocess.run(["openssl", "pkcs8", "-topk8", "-nocrypt", "-in", "close.pkcs1.pem", "-out", "rsa-close-primes.key.pem"], check=True)
subprocess.run(["openssl", "rsa", "-check", "-noout", "-in", "rsa-close-primes.key.pem"], check=True)
subprocess.run(["rm", "close.pkcs1.pem"], check=True)

# Small prime factor: 751 * m, m without a factor below 752, the product exactly 2048 bits.
while True:
    m = rng.getrandbits(2039) | (1 << 2038) | 1
    n = 751 * m
    if n.bit_length() == 2048 and all(m % f for f in range(3, 752, 2)):
        break
write("rsa-small-prime.pub.pem", pem("PUBLIC KEY", spki(n, 65537)))

# A good key, and its modulus with exponent 3.
subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "good.key"], check=True)
subprocess.run(["openssl", "pkey", "-in", "good.key", "-pubout", "-out", "rsa-good.pem"], check=True)
mod_hex = subprocess.run(["openssl", "rsa", "-pubin", "-in", "rsa-good.pem", "-noout", "-modulus"], check=True, capture_output=True, text=True).stdout
subprocess.run(["rm", "good.key"], check=True)
n = int(mod_hex.strip().split("=", 1)[1], 16)
write("rsa-exponent-3.pub.pem", pem("PUBLIC KEY", spki(n, 3)))
