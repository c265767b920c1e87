/* LD_PRELOAD library that makes CPUID report a smaller x86 CPU, so that onnxruntime (MLAS), numpy
 * and torch pick the kernels of that CPU and run them natively on this one. Two ways to get there:
 *
 * CPUID faulting (the default; needs 'cpuid_fault' in /proc/cpuinfo): the constructor turns on
 * CPUID faulting for the thread (arch_prctl ARCH_SET_CPUID 0; threads created later inherit it,
 * execve clears it, so every exec'd process re-arms through LD_PRELOAD). Every CPUID in the process
 * then raises SIGSEGV; the handler executes the real CPUID with faulting briefly off, clears the
 * bits of the profile, writes EAX..EDX into the interrupted context and steps over the 2-byte
 * instruction. Every library in the process sees the smaller CPU.
 *
 * Patched code (MAGICSELECTOR_CPUID_PATCHED=1, for CPUs and VMs without CPUID faulting; faulting is
 * then not tried at all): tools/cpuid_mask/patch_onnxruntime.py has copied onnxruntime and replaced
 * each CPUID (0F A2) in its binding with UD2 (0F 0B), listing the patched sites in
 * MAGICSELECTOR_CPUID_SITES (read by the constructor). A UD2 raises SIGILL; when it is at a listed
 * site of a listed file (dladdr1 finds the object, the same file by path or device/inode, the
 * offset from its load address is listed, the bytes are 0F 0B) the handler answers it as above with
 * the native CPUID, masked. Only that patched copy sees the smaller CPU; every other library
 * (numpy, glibc, ...) sees the real one. Any other SIGILL, a UD2 elsewhere included, goes on.
 *
 * The signal we own (SIGSEGV with faulting, SIGILL with patched code) goes to the handler the
 * program installed when it is not ours to answer: our sigaction/signal wrappers keep our handler
 * first and remember theirs, or the default action applies. sigprocmask/pthread_sigmask keep it
 * unblocked.
 *
 * Environment: MAGICSELECTOR_CPUID_PROFILE = avx2 (no AVX-512, no VNNI of any width, no AMX);
 * unset, empty or "none" leaves CPUID alone. MAGICSELECTOR_CPUID_PATCHED=1 and
 * MAGICSELECTOR_CPUID_SITES=FILE select the patched-code way (FILE: "file RELATIVE/PATH.so" lines,
 * paths relative to FILE's folder, each followed by the hexadecimal virtual addresses of its
 * patched sites; '#' starts a comment). MAGICSELECTOR_CPUID_STATS=1 prints how many CPUIDs were
 * answered when the process exits.
 *
 * XGETBV cannot be trapped: XCR0 still shows the ZMM/opmask/tile state enabled. Every dispatcher
 * we checked (MLAS, numpy, oneDNN) requires the CPUID feature bit as well, so clearing the bit is
 * enough; leaf 0xD is masked too for code that reads the supported-state mask there.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef __x86_64__
#error "cpuid_mask is x86-64 only"
#endif

#define ARCH_GET_CPUID 0x1011
#define ARCH_SET_CPUID 0x1012

#define BIT(n) (1u << (n))

enum profile { PROFILE_NONE, PROFILE_AVX2 };
enum mode { MODE_OFF, MODE_FAULTING, MODE_PATCHED };

static enum profile active_profile = PROFILE_NONE;
static enum mode active_mode = MODE_OFF;
/* SIGSEGV (CPUID faulting) or SIGILL (patched code); 0 while off */
static int owned_signal;
static volatile unsigned long answered;

/* What the program believes is its disposition of the owned signal; ours stays installed. */
static struct sigaction program_action;
static volatile int program_action_valid;

/* The patched objects and their sites, read once by the constructor. */
#define MAX_PATCHED_OBJECTS 8
struct patched_object {
    char *path;
    dev_t dev;
    ino_t ino;
    int have_inode;
    uintptr_t *sites; /* sorted virtual addresses */
    size_t count;
};
static struct patched_object patched[MAX_PATCHED_OBJECTS];
static size_t patched_count;

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef sighandler_t (*signal_fn)(int, sighandler_t);

static sigaction_fn real_sigaction_ptr;

static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction_ptr)
        real_sigaction_ptr = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return real_sigaction_ptr(sig, act, old);
}

static long set_cpuid_faulting(int enabled_cpuid) {
    return syscall(SYS_arch_prctl, ARCH_SET_CPUID, (unsigned long)enabled_cpuid);
}

static void native_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
    __asm__ volatile("cpuid"
                     : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3])
                     : "a"(leaf), "c"(subleaf));
}

/* Clears what an AVX2 CPU without VNNI (Haswell .. Zen 3) does not have. */
static void mask_avx2(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
    if (leaf == 7 && subleaf == 0) {
        /* EBX: AVX512F, DQ, IFMA, PF, ER, CD, BW, VL */
        r[1] &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        /* ECX: AVX512_VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
        r[2] &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        /* EDX: AVX512_4VNNIW, 4FMAPS, VP2INTERSECT, AMX_BF16, AVX512_FP16, AMX_TILE, AMX_INT8 */
        r[3] &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
    } else if (leaf == 7 && subleaf == 1) {
        /* EAX: AVX_VNNI, AVX512_BF16, AMX_FP16, AVX_IFMA */
        r[0] &= ~(BIT(4) | BIT(5) | BIT(21) | BIT(23));
        /* EDX: AVX_VNNI_INT8, AVX_NE_CONVERT, AMX_COMPLEX, AVX_VNNI_INT16, AVX10 */
        r[3] &= ~(BIT(4) | BIT(5) | BIT(8) | BIT(10) | BIT(19));
    } else if (leaf == 0xD && subleaf == 0) {
        /* supported XSAVE state: opmask, ZMM_Hi256, Hi16_ZMM, XTILECFG, XTILEDATA */
        r[0] &= ~(BIT(5) | BIT(6) | BIT(7) | BIT(17) | BIT(18));
    } else if (leaf == 0xD && (subleaf == 5 || subleaf == 6 || subleaf == 7 ||
                               subleaf == 17 || subleaf == 18)) {
        r[0] = r[1] = r[2] = r[3] = 0; /* a state component that is not supported */
    } else if (leaf == 0x1D || leaf == 0x1E || leaf == 0x24) {
        r[0] = r[1] = r[2] = r[3] = 0; /* AMX tile and TMUL info, AVX10 info */
    }
}

static int is_cpuid_at(const void *rip) {
    const unsigned char *p = (const unsigned char *)rip;
    return p && p[0] == 0x0F && p[1] == 0xA2;
}

static int is_ud2_at(const void *rip) {
    const unsigned char *p = (const unsigned char *)rip;
    return p && p[0] == 0x0F && p[1] == 0x0B;
}

static int has_site(const struct patched_object *obj, uintptr_t vaddr) {
    size_t lo = 0, hi = obj->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (obj->sites[mid] == vaddr)
            return 1;
        if (obj->sites[mid] < vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Whether a UD2 at rip is a CPUID that patch_onnxruntime.py replaced. dladdr1 and stat run in a
 * signal handler here: the UD2 sites are in onnxruntime's own code, never inside the dynamic loader
 * (whose lock is recursive anyway), and stat is a plain system call. */
static int is_patched_site(const void *rip) {
    Dl_info info;
    struct link_map *map = NULL;
    if (!is_ud2_at(rip) || !dladdr1(rip, &info, (void **)&map, RTLD_DL_LINKMAP) || !map ||
        !info.dli_fname)
        return 0;
    uintptr_t vaddr = (uintptr_t)rip - (uintptr_t)map->l_addr;
    struct stat st;
    int have_st = stat(info.dli_fname, &st) == 0;
    for (size_t i = 0; i < patched_count; i++) {
        const struct patched_object *obj = &patched[i];
        int same = strcmp(info.dli_fname, obj->path) == 0 ||
                   (have_st && obj->have_inode && st.st_dev == obj->dev && st.st_ino == obj->ino);
        if (same && has_site(obj, vaddr))
            return 1;
    }
    return 0;
}

static void run_program_handler(int sig, siginfo_t *info, void *ctx) {
    struct sigaction act = program_action;
    if (!program_action_valid)
        act.sa_handler = SIG_DFL, act.sa_flags = 0;
    if (act.sa_flags & SA_SIGINFO) {
        if (act.sa_flags & SA_RESETHAND)
            program_action.sa_handler = SIG_DFL, program_action.sa_flags = 0;
        act.sa_sigaction(sig, info, ctx);
        return;
    }
    if (act.sa_handler == SIG_IGN && info->si_code <= 0)
        return; /* a signal sent by kill/raise that the program ignores */
    if (act.sa_handler == SIG_DFL || act.sa_handler == SIG_IGN) {
        /* default action: die by the signal. A fault re-executes the instruction after we return;
         * a sent signal is sent again and delivered once the handler returns. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        real_sigaction(sig, &dfl, NULL);
        if (info->si_code <= 0)
            raise(sig);
        return;
    }
    if (act.sa_flags & SA_RESETHAND)
        program_action.sa_handler = SIG_DFL, program_action.sa_flags = 0;
    act.sa_handler(sig);
}

static void answer_cpuid(greg_t *gregs, int faulting) {
    uint32_t r[4];
    uint32_t leaf = (uint32_t)gregs[REG_RAX], subleaf = (uint32_t)gregs[REG_RCX];
    if (faulting)
        set_cpuid_faulting(1);
    native_cpuid(leaf, subleaf, r);
    if (faulting)
        set_cpuid_faulting(0);
    if (active_profile == PROFILE_AVX2)
        mask_avx2(leaf, subleaf, r);
    /* CPUID zero-extends into the 64-bit registers */
    gregs[REG_RAX] = r[0];
    gregs[REG_RBX] = r[1];
    gregs[REG_RCX] = r[2];
    gregs[REG_RDX] = r[3];
    gregs[REG_RIP] += 2; /* CPUID and UD2 are both 2 bytes */
    __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
}

static void on_signal(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = (ucontext_t *)ctx;
    greg_t *gregs = uc->uc_mcontext.gregs;
    const void *rip = (const void *)gregs[REG_RIP];
    if (active_mode == MODE_FAULTING && sig == SIGSEGV) {
        /* A CPUID fault is a SIGSEGV with si_code SI_KERNEL at the instruction itself. */
        if (info->si_code == SI_KERNEL && is_cpuid_at(rip)) {
            answer_cpuid(gregs, 1);
            return;
        }
    } else if (active_mode == MODE_PATCHED && sig == SIGILL) {
        /* A UD2 is a SIGILL from the kernel (ILL_ILLOPN) at the instruction itself. */
        if (info->si_code > 0 && info->si_addr == rip && is_patched_site(rip)) {
            answer_cpuid(gregs, 0);
            return;
        }
    }
    run_program_handler(sig, info, ctx);
}

static int install_handler(int sig) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_signal;
    /* NODEFER: a CPUID inside the program's own handler must still be answered;
     * ONSTACK: a program's alternate signal stack (stack-overflow reporters) stays usable */
    act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
    sigemptyset(&act.sa_mask);
    struct sigaction previous;
    if (real_sigaction(sig, &act, &previous) != 0)
        return -1;
    program_action = previous;
    program_action_valid = 1;
    return 0;
}

/* The program's view of the owned signal: installing a handler records it for chaining instead of
 * replacing ours; reading returns what the program installed last. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (owned_signal == 0 || sig != owned_signal)
        return real_sigaction(sig, act, old);
    if (old)
        *old = program_action;
    if (act)
        program_action = *act;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    if (owned_signal == 0 || sig != owned_signal) {
        static signal_fn real_signal;
        if (!real_signal)
            real_signal = (signal_fn)dlsym(RTLD_NEXT, "signal");
        return real_signal(sig, handler);
    }
    sighandler_t before = program_action.sa_handler; /* shares a union with sa_sigaction */
    memset(&program_action, 0, sizeof program_action);
    program_action.sa_handler = handler;
    program_action.sa_flags = SA_RESTART;
    sigemptyset(&program_action.sa_mask);
    return before;
}

/* The kernel kills a thread whose CPUID faults (or whose UD2 traps) while the signal is blocked,
 * and worker pools often block every signal: keep the owned signal deliverable. */
typedef int (*sigmask_fn)(int, const sigset_t *, sigset_t *);

static int without_owned(sigmask_fn fn, int how, const sigset_t *set, sigset_t *old) {
    if (!set || how == SIG_UNBLOCK || owned_signal == 0)
        return fn(how, set, old);
    sigset_t allowed = *set;
    sigdelset(&allowed, owned_signal);
    return fn(how, &allowed, old);
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    static sigmask_fn real_fn;
    if (!real_fn)
        real_fn = (sigmask_fn)dlsym(RTLD_NEXT, "sigprocmask");
    return without_owned(real_fn, how, set, old);
}

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    static sigmask_fn real_fn;
    if (!real_fn)
        real_fn = (sigmask_fn)dlsym(RTLD_NEXT, "pthread_sigmask");
    return without_owned(real_fn, how, set, old);
}

static void report_stats(void) {
    fprintf(stderr, "cpuid_mask[%d]: %lu CPUID instructions answered\n", (int)getpid(), answered);
}

static int compare_sites(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* Reads MAGICSELECTOR_CPUID_SITES; a message and exit status 2 on anything unexpected. */
static void load_sites(void) {
    const char *file = getenv("MAGICSELECTOR_CPUID_SITES");
    if (!file || !*file) {
        fprintf(stderr, "cpuid_mask: MAGICSELECTOR_CPUID_PATCHED=1 needs MAGICSELECTOR_CPUID_SITES "
                        "(the list tools/cpuid_mask/patch_onnxruntime.py writes)\n");
        _exit(2);
    }
    FILE *in = fopen(file, "r");
    if (!in) {
        fprintf(stderr, "cpuid_mask: cannot read MAGICSELECTOR_CPUID_SITES=%s\n", file);
        _exit(2);
    }
    const char *slash = strrchr(file, '/');
    size_t dir_len = slash ? (size_t)(slash - file) : 1;
    const char *dir = slash ? file : ".";
    char line[4096];
    size_t capacity = 0, line_no = 0;
    struct patched_object *obj = NULL;
    while (fgets(line, sizeof line, in)) {
        line_no++;
        line[strcspn(line, "#\r\n")] = '\0';
        char *text = line + strspn(line, " \t");
        if (!*text)
            continue;
        if (strncmp(text, "file ", 5) == 0) {
            if (patched_count == MAX_PATCHED_OBJECTS)
                goto bad;
            const char *rel = text + 5 + strspn(text + 5, " \t");
            obj = &patched[patched_count++];
            size_t len = dir_len + 1 + strlen(rel) + 1;
            obj->path = malloc(len);
            if (!obj->path)
                goto bad;
            snprintf(obj->path, len, "%.*s/%s", (int)dir_len, dir, rel);
            struct stat st;
            if (stat(obj->path, &st) != 0) {
                fprintf(stderr, "cpuid_mask: %s lists %s, which does not exist\n", file, obj->path);
                _exit(2);
            }
            obj->dev = st.st_dev, obj->ino = st.st_ino, obj->have_inode = 1;
            capacity = 0;
            continue;
        }
        char *end;
        unsigned long long vaddr = strtoull(text, &end, 16);
        if (!obj || end == text || *(end + strspn(end, " \t")) != '\0')
            goto bad;
        if (obj->count == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            uintptr_t *grown = realloc(obj->sites, capacity * sizeof *grown);
            if (!grown)
                goto bad;
            obj->sites = grown;
        }
        obj->sites[obj->count++] = (uintptr_t)vaddr;
    }
    fclose(in);
    if (patched_count == 0) {
        fprintf(stderr, "cpuid_mask: %s lists no patched file\n", file);
        _exit(2);
    }
    for (size_t i = 0; i < patched_count; i++)
        qsort(patched[i].sites, patched[i].count, sizeof *patched[i].sites, compare_sites);
    return;
bad:
    fprintf(stderr, "cpuid_mask: cannot use %s (line %zu)\n", file, line_no);
    _exit(2);
}

__attribute__((constructor)) static void cpuid_mask_init(void) {
    const char *name = getenv("MAGICSELECTOR_CPUID_PROFILE");
    if (!name || !*name || strcmp(name, "none") == 0)
        return;
    if (strcmp(name, "avx2") == 0) {
        active_profile = PROFILE_AVX2;
    } else {
        fprintf(stderr, "cpuid_mask: MAGICSELECTOR_CPUID_PROFILE=%s is not a profile (avx2, none)\n", name);
        _exit(2);
    }
    const char *patched_env = getenv("MAGICSELECTOR_CPUID_PATCHED");
    int use_patched = patched_env && strcmp(patched_env, "1") == 0;
    if (use_patched)
        load_sites();
    active_mode = use_patched ? MODE_PATCHED : MODE_FAULTING;
    owned_signal = use_patched ? SIGILL : SIGSEGV;
    if (install_handler(owned_signal) != 0) {
        perror(use_patched ? "cpuid_mask: sigaction(SIGILL)" : "cpuid_mask: sigaction(SIGSEGV)");
        _exit(2);
    }
    /* A process that asked for a mask and silently ran the full CPU would report false numbers. */
    if (!use_patched && set_cpuid_faulting(0) != 0) {
        perror("cpuid_mask: arch_prctl(ARCH_SET_CPUID, 0) (needs a CPU and kernel with CPUID faulting)");
        _exit(2);
    }
    const char *stats = getenv("MAGICSELECTOR_CPUID_STATS");
    if (stats && strcmp(stats, "1") == 0)
        atexit(report_stats);
}
