/*
 * disk_crc.c — CRC32C (Castagnoli) by the fastest method the CPU has
 * (disk.h), chosen once at run time:
 *
 *   table    slicing by 8 (any CPU; disk_crc32c_sw)
 *   sse42    SSE4.2's crc32 instruction, one stream: bound by the
 *            instruction's latency (3 cycles for 8 bytes)
 *   sse42x3  three streams of crc32 over three adjacent blocks at once (the
 *            instruction's throughput, 8 bytes a cycle), the streams joined
 *            by a carry-less multiply (PCLMULQDQ) that shifts a CRC past the
 *            blocks after it
 *   vpclmul  AVX-512's VPCLMULQDQ: 256 bytes a step folded into sixteen
 *            128-bit remainders (four 512-bit registers), each multiplied
 *            past the 256 bytes after it and added to them; at the end the
 *            remainders are folded into one and reduced by crc32 (lengths
 *            under VP_MIN go to sse42x3)
 *
 * Joining: a CRC register c after a block A, followed by B, is
 * c * x^(8|B|) + crc0(B) mod P (crc0: from a zero register). The shift is
 * clmul(c, x^(8|B|-33) mod P) reduced by crc32 of the 64-bit product: the
 * instruction multiplies by x^32, the product of two reflected values
 * carries one more x, which makes 33.
 *
 * Folding (vpclmul): a 128-bit block as loaded is the polynomial whose
 * first bit (bit 0 of byte 0) is x^127; its low half H (x^127..x^64) and
 * high half L (x^63..x^0). The remainder R = H x^64 + L of the bytes so far,
 * moved past T bits, is H x^(64+T) + L x^T mod P: clmul(H, x^(T+31) mod P)
 * xor clmul(L, x^(T-33) mod P), by the same 33. The CRC register enters as
 * the first 32 bits of the data (c x^|M| + M x^32 = (M + c x^(|M|-32)) x^32),
 * and crc32 of the last remainder's two halves from 0 is R x^32 mod P.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "disk.h"
#include "disk_lock.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC_X86 1
#include <immintrin.h>
#include <nmmintrin.h>
#include <wmmintrin.h>
#endif

#define CRC32C_POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_method; /* set once, under crc_once */

/* ---- GF(2) arithmetic mod P, reflected (bit 31 is x^0) ---- */

static uint32_t crc_multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (; m; m >>= 1) {
		if (a & m)
			p ^= b;
		b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
	}
	return p;
}

/* x^n mod P */
static uint32_t crc_xpow(uint64_t n)
{
	uint32_t p = 1u << 31, sq = 1u << 30; /* x^0, x^1 */

	for (; n; n >>= 1) {
		if (n & 1)
			p = crc_multmodp(sq, p);
		sq = crc_multmodp(sq, sq);
	}
	return p;
}

/* ---- the table ---- */

static void crc_tab_build(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++) {
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] =
			    (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
	}
}

static uint32_t crc_table(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;

	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = crc ^ disk_le32_get(p), hi = disk_le32_get(p + 4);

		crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		      crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^
		      crc_tab[2][(hi >> 8) & 0xff] ^ crc_tab[1][(hi >> 16) & 0xff] ^
		      crc_tab[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#ifdef CRC_X86

/* The block sizes of the three streams, largest first, and for each the
 * shift constants past one block and past two: x^(8L-33), x^(16L-33). */
static const size_t x3_len[] = {4096, 512, 64};
#define X3_N (sizeof(x3_len) / sizeof(x3_len[0]))
static uint32_t x3_k1[X3_N], x3_k2[X3_N];

__attribute__((target("sse4.2"))) static uint64_t crc_one(uint64_t c, const unsigned char *p,
							  size_t len)
{
	while (len >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		c = _mm_crc32_u64(c, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return c;
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const void *data,
							    size_t len)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	return ~(uint32_t)crc_one(c, p, len);
}

/* c * x^(8L) mod P, k = x^(8L-33) mod P */
__attribute__((target("sse4.2,pclmul"))) static inline uint64_t crc_shift(uint64_t c, uint32_t k)
{
	__m128i m =
	    _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)(uint32_t)c), _mm_cvtsi32_si128((int)k), 0);

	return _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(m));
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t crc_sse42x3(uint32_t crc, const void *data,
								     size_t len)
{
	const unsigned char *p = data;
	uint64_t c0 = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c0 = _mm_crc32_u8((uint32_t)c0, *p++);
		len--;
	}
	for (size_t b = 0; b < X3_N; b++) {
		size_t l = x3_len[b];

		while (len >= 3 * l) {
			uint64_t c1 = 0, c2 = 0;
			const unsigned char *end = p + l;

			for (; p < end; p += 8) {
				uint64_t w0, w1, w2;

				memcpy(&w0, p, 8);
				memcpy(&w1, p + l, 8);
				memcpy(&w2, p + 2 * l, 8);
				c0 = _mm_crc32_u64(c0, w0);
				c1 = _mm_crc32_u64(c1, w1);
				c2 = _mm_crc32_u64(c2, w2);
			}
			c0 = crc_shift(c0, x3_k2[b]) ^ crc_shift(c1, x3_k1[b]) ^ c2;
			p += 2 * l;
			len -= 3 * l;
		}
	}
	return ~(uint32_t)crc_one(c0, p, len);
}

/* vpclmul: shorter runs than this go to sse42x3 (the set-up and the final
 * folds cost about as much as 256 bytes) */
#define VP_MIN 1024
/* fold constants (x^(T+31), x^(T-33) mod P) for T = 2048 (a 256-byte step),
 * 1536, 1024, 512 (the four registers onto the last), 384, 256, 128 (the
 * four lanes of the last register onto its last lane) */
static const unsigned vp_t[] = {2048, 1536, 1024, 512, 384, 256, 128};
#define VP_N (sizeof(vp_t) / sizeof(vp_t[0]))
static uint32_t vp_k[VP_N][2];

/* x moved past T bits (k: T's constants) plus d: one 128-bit lane */
__attribute__((target("sse4.2,pclmul"))) static inline __m128i
vp_fold1(__m128i x, const uint32_t *k, __m128i d)
{
	__m128i kk = _mm_set_epi64x((long long)k[1], (long long)k[0]);

	return _mm_xor_si128(
	    _mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00), _mm_clmulepi64_si128(x, kk, 0x11)), d);
}

/* the same in each of the four lanes of x */
__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i vp_fold4(__m512i x, __m512i kk,
									     __m512i d)
{
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, kk, 0x00),
					 _mm512_clmulepi64_epi128(x, kk, 0x11), d, 0x96);
}

__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i vp_k4(const uint32_t *k)
{
	return _mm512_set4_epi64((long long)k[1], (long long)k[0], (long long)k[1],
				 (long long)k[0]);
}

__attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq"))) static uint32_t
crc_vpclmul(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	__m512i x0, x1, x2, x3, k;
	__m128i r;
	uint64_t c;

	if (len < VP_MIN)
		return crc_sse42x3(crc, data, len);
	x0 = _mm512_xor_si512(_mm512_loadu_si512(p),
			      _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
	x1 = _mm512_loadu_si512(p + 64);
	x2 = _mm512_loadu_si512(p + 128);
	x3 = _mm512_loadu_si512(p + 192);
	p += 256;
	len -= 256;
	k = vp_k4(vp_k[0]);
	while (len >= 256) {
		x0 = vp_fold4(x0, k, _mm512_loadu_si512(p));
		x1 = vp_fold4(x1, k, _mm512_loadu_si512(p + 64));
		x2 = vp_fold4(x2, k, _mm512_loadu_si512(p + 128));
		x3 = vp_fold4(x3, k, _mm512_loadu_si512(p + 192));
		p += 256;
		len -= 256;
	}
	/* the four registers onto the last: x0 is 1536 bits before x3, ... */
	x3 = vp_fold4(x0, vp_k4(vp_k[1]), x3);
	x3 = vp_fold4(x1, vp_k4(vp_k[2]), x3);
	x3 = vp_fold4(x2, vp_k4(vp_k[3]), x3);
	/* its four lanes onto the last */
	r = _mm512_extracti32x4_epi32(x3, 3);
	r = vp_fold1(_mm512_extracti32x4_epi32(x3, 0), vp_k[4], r);
	r = vp_fold1(_mm512_extracti32x4_epi32(x3, 1), vp_k[5], r);
	r = vp_fold1(_mm512_extracti32x4_epi32(x3, 2), vp_k[6], r);
	while (len >= 16) { /* whole blocks left */
		r = vp_fold1(r, vp_k[6], _mm_loadu_si128((const __m128i *)(const void *)p));
		p += 16;
		len -= 16;
	}
	c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
	c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(r, 1));
	return ~(uint32_t)crc_one(c, p, len);
}

static int crc_cpu_has(int m)
{
	__builtin_cpu_init();
	switch (m) {
	case DISK_CRC_SSE42:
		return __builtin_cpu_supports("sse4.2");
	case DISK_CRC_SSE42X3:
		return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
	case DISK_CRC_VPCLMUL:
		return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") &&
		       __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
	default:
		return m == DISK_CRC_TABLE;
	}
}
#else
static int crc_cpu_has(int m)
{
	return m == DISK_CRC_TABLE;
}
#endif

static void crc_init(void)
{
	crc_tab_build();
#ifdef CRC_X86
	for (size_t b = 0; b < X3_N; b++) {
		x3_k1[b] = crc_xpow(8 * x3_len[b] - 33);
		x3_k2[b] = crc_xpow(16 * x3_len[b] - 33);
	}
	for (size_t t = 0; t < VP_N; t++) {
		vp_k[t][0] = crc_xpow(vp_t[t] + 31);
		vp_k[t][1] = crc_xpow(vp_t[t] - 33);
	}
#else
	(void)crc_xpow;
#endif
	for (int m = DISK_CRC_TABLE; m < DISK_CRC_METHODS; m++) {
		if (crc_cpu_has(m))
			crc_method = m;
	}
}

uint32_t disk_crc32c_by(int method, uint32_t crc, const void *data, size_t len)
{
	pthread_once(&crc_once, crc_init);
	switch (method) {
#ifdef CRC_X86
	case DISK_CRC_SSE42:
		return crc_sse42(crc, data, len);
	case DISK_CRC_SSE42X3:
		return crc_sse42x3(crc, data, len);
	case DISK_CRC_VPCLMUL:
		return crc_vpclmul(crc, data, len);
#endif
	default:
		return crc_table(crc, data, len);
	}
}

uint32_t disk_crc32c_update(uint32_t crc, const void *data, size_t len)
{
	DISK_OFF_LOOP(); /* the fill writer checksums, never the I/O loop (disk_lock.h) */
	pthread_once(&crc_once, crc_init);
	return disk_crc32c_by(crc_method, crc, data, len);
}

uint32_t disk_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
	return disk_crc32c_by(DISK_CRC_TABLE, crc, data, len);
}

int disk_crc32c_method(void)
{
	pthread_once(&crc_once, crc_init);
	return crc_method;
}

int disk_crc32c_supported(int method)
{
	return method >= 0 && method < DISK_CRC_METHODS && crc_cpu_has(method);
}

const char *disk_crc32c_name(int method)
{
	static const char *const names[DISK_CRC_METHODS] = {"table", "sse42", "sse42x3", "vpclmul"};

	return method >= 0 && method < DISK_CRC_METHODS ? names[method] : "?";
}

int disk_crc32c_hw(void)
{
	return disk_crc32c_method() != DISK_CRC_TABLE;
}
