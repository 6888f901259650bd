/*
 * cachetier_guard.c — no fault on a mapped blob cut under the process.
 *
 * A blob file truncated in place while mapped makes every access to its
 * pages past the new end fault (SIGBUS): cachetier_meta_changed sees the
 * truncation at the next request that asks (cachetier_watch.c), but a
 * request of another thread may be reading the mapping at that moment. So
 * every mapped blob's range is registered here, and a SIGBUS handler
 * (installed at the first registration, process-wide) puts a page of zeros
 * over the page that faulted when it lies in a registered range: the load
 * is retried and reads zeros, and the range is marked (cachetier__guard_hit),
 * so that cachetier_meta_changed says so at once, without waiting for the
 * truncation's inotify event (queued only after the pages went). A fault anywhere else goes to the
 * handler that was installed before (a sanitizer's), else to the default
 * action: the process dies as it would have.
 *
 * The handler reads the registry without a lock: GUARD_MAX slots of
 * (start, end) set and cleared with atomics (start 0: free, 1: being
 * filled in), scanned up to the highest slot ever used. A blob that finds no free slot is not
 * guarded: the caller reads it into memory instead (cachetier_meta_watched). vm.max_map_count
 * (65,530 by default) bounds the mappings a process can have anyway.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cachetier_i.h"

#define GUARD_MAX 65536u

static struct {
	atomic_uintptr_t start, end; /* start 0: free */
	atomic_int hit;		     /* a fault in the range was answered with zeros */
} guard[GUARD_MAX];
static atomic_uint guard_top; /* slots [0, guard_top) may be in use */
static uintptr_t guard_page;  /* the page size, set before the handler */
static struct sigaction guard_prev;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int guard_ok; /* the handler is installed */

static void guard_handler(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned top = atomic_load_explicit(&guard_top, memory_order_acquire);

	for (unsigned i = 0; i < top; i++) {
		uintptr_t s = atomic_load_explicit(&guard[i].start, memory_order_acquire);

		if (s > 1 && a >= s &&
		    a < atomic_load_explicit(&guard[i].end, memory_order_acquire)) {
			void *p = (void *)(a & ~(guard_page - 1));

			atomic_store_explicit(&guard[i].hit, 1, memory_order_release);
			if (mmap(p, guard_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
				 -1, 0) != MAP_FAILED)
				return; /* the load is retried: zeros */
			break;
		}
	}
	if ((guard_prev.sa_flags & SA_SIGINFO) && guard_prev.sa_sigaction) {
		guard_prev.sa_sigaction(sig, si, uc);
		return;
	}
	if (!(guard_prev.sa_flags & SA_SIGINFO) && guard_prev.sa_handler != SIG_DFL &&
	    guard_prev.sa_handler != SIG_IGN) {
		guard_prev.sa_handler(sig);
		return;
	}
	{
		/* the default action: the faulting access runs again and kills
		 * (sigaction, not signal(): async-signal-safe) */
		struct sigaction dfl;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigemptyset(&dfl.sa_mask);
		sigaction(SIGBUS, &dfl, NULL);
	}
}

static void guard_install(void)
{
	struct sigaction sa;
	long page = sysconf(_SC_PAGESIZE);

	guard_page = page > 0 ? (uintptr_t)page : 4096;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	guard_ok = sigaction(SIGBUS, &sa, &guard_prev) == 0;
}

int cachetier__guard_add(const void *addr, size_t len)
{
	uintptr_t s = (uintptr_t)addr;
	unsigned from = atomic_load(&guard_top);

	pthread_once(&guard_once, guard_install);
	if (!guard_ok || !addr || !len)
		return -1;
	/* from the highest slot used (free unless the registry is full), then
	 * from the start: slots freed by unmaps */
	for (unsigned k = 0; k < GUARD_MAX; k++) {
		unsigned i = (from + k) % GUARD_MAX;
		uintptr_t free_ = 0;

		/* claimed (1: no handler matches it), its end, then its start */
		if (atomic_load_explicit(&guard[i].start, memory_order_relaxed) != 0 ||
		    !atomic_compare_exchange_strong(&guard[i].start, &free_, 1))
			continue;
		atomic_store_explicit(&guard[i].end, s + len, memory_order_relaxed);
		atomic_store_explicit(&guard[i].hit, 0, memory_order_relaxed);
		atomic_store_explicit(&guard[i].start, s, memory_order_release);
		for (unsigned top = atomic_load(&guard_top); top <= i;)
			if (atomic_compare_exchange_weak(&guard_top, &top, i + 1))
				break;
		return (int)i;
	}
	return -1;
}

void cachetier__guard_del(int slot)
{
	if (slot >= 0)
		atomic_store_explicit(&guard[slot].start, 0, memory_order_release);
}

int cachetier__guard_hit(int slot)
{
	return slot >= 0 && atomic_load_explicit(&guard[slot].hit, memory_order_acquire);
}
