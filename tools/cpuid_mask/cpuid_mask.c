/* LD_PRELOAD library that makes CPUID report a smaller x86 CPU, so that onnxruntime (MLAS), numpy
 * and torch pick the kernels of that CPU and run them natively on this one.
 *
 * The constructor turns on CPUID faulting for the thread (arch_prctl ARCH_SET_CPUID 0; threads
 * created later inherit it, execve clears it, so every exec'd process re-arms through LD_PRELOAD).
 * Every CPUID then raises SIGSEGV; the handler executes the real CPUID with faulting briefly
 * off, clears the bits of the profile, writes EAX..EDX into the interrupted context and steps
 * over the 2-byte instruction. Any other SIGSEGV goes to the handler the program installed (our
 * sigaction/signal wrappers keep ours first and remember theirs) or to the default action.
 *
 * Environment: MAGICSELECTOR_CPUID_PROFILE = avx2 (no AVX-512, no VNNI of any width, no AMX);
 * unset, empty or "none" leaves CPUID alone. MAGICSELECTOR_CPUID_STATS=1 prints how many CPUIDs
 * were answered when the process exits.
 *
 * XGETBV cannot be trapped: XCR0 still shows the ZMM/opmask/tile state enabled. Every dispatcher
 * we checked (MLAS, numpy, oneDNN) requires the CPUID feature bit as well, so clearing the bit is
 * enough; leaf 0xD is masked too for code that reads the supported-state mask there.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static enum profile active_profile = PROFILE_NONE;
static volatile unsigned long answered;

/* What the program believes is its SIGSEGV disposition; ours stays installed in the kernel. */
static struct sigaction program_action;
static volatile int program_action_valid;

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
        return; /* a SIGSEGV sent by kill/raise that the program ignores */
    if (act.sa_handler == SIG_DFL || act.sa_handler == SIG_IGN) {
        /* default action: die by SIGSEGV. A fault re-executes the instruction after we return;
         * a sent signal is sent again and delivered once the handler returns. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        real_sigaction(SIGSEGV, &dfl, NULL);
        if (info->si_code <= 0)
            raise(SIGSEGV);
        return;
    }
    if (act.sa_flags & SA_RESETHAND)
        program_action.sa_handler = SIG_DFL, program_action.sa_flags = 0;
    act.sa_handler(sig);
}

static void on_sigsegv(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = (ucontext_t *)ctx;
    greg_t *gregs = uc->uc_mcontext.gregs;
    const void *rip = (const void *)gregs[REG_RIP];
    /* A CPUID fault is a SIGSEGV with si_code SI_KERNEL at the instruction itself. */
    if (info->si_code == SI_KERNEL && is_cpuid_at(rip)) {
        uint32_t r[4];
        uint32_t leaf = (uint32_t)gregs[REG_RAX], subleaf = (uint32_t)gregs[REG_RCX];
        set_cpuid_faulting(1);
        native_cpuid(leaf, subleaf, r);
        set_cpuid_faulting(0);
        if (active_profile == PROFILE_AVX2)
            mask_avx2(leaf, subleaf, r);
        /* CPUID zero-extends into the 64-bit registers */
        gregs[REG_RAX] = r[0];
        gregs[REG_RBX] = r[1];
        gregs[REG_RCX] = r[2];
        gregs[REG_RDX] = r[3];
        gregs[REG_RIP] += 2;
        __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
        return;
    }
    run_program_handler(sig, info, ctx);
}

static int install_handler(void) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_sigsegv;
    /* NODEFER: a CPUID inside the program's own SIGSEGV handler must still be answered;
     * ONSTACK: a program's alternate signal stack (stack-overflow reporters) stays usable */
    act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
    sigemptyset(&act.sa_mask);
    struct sigaction previous;
    if (real_sigaction(SIGSEGV, &act, &previous) != 0)
        return -1;
    program_action = previous;
    program_action_valid = 1;
    return 0;
}

/* The program's view of SIGSEGV: installing a handler records it for chaining instead of
 * replacing ours; reading returns what the program installed last. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig != SIGSEGV || active_profile == PROFILE_NONE)
        return real_sigaction(sig, act, old);
    if (old)
        *old = program_action;
    if (act)
        program_action = *act;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    if (sig != SIGSEGV || active_profile == PROFILE_NONE) {
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

/* The kernel kills a thread whose CPUID faults while SIGSEGV is blocked, and worker pools often
 * block every signal: keep SIGSEGV deliverable. */
typedef int (*sigmask_fn)(int, const sigset_t *, sigset_t *);

static int without_sigsegv(sigmask_fn fn, int how, const sigset_t *set, sigset_t *old) {
    if (!set || how == SIG_UNBLOCK || active_profile == PROFILE_NONE)
        return fn(how, set, old);
    sigset_t allowed = *set;
    sigdelset(&allowed, SIGSEGV);
    return fn(how, &allowed, old);
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    static sigmask_fn real_fn;
    if (!real_fn)
        real_fn = (sigmask_fn)dlsym(RTLD_NEXT, "sigprocmask");
    return without_sigsegv(real_fn, how, set, old);
}

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    static sigmask_fn real_fn;
    if (!real_fn)
        real_fn = (sigmask_fn)dlsym(RTLD_NEXT, "pthread_sigmask");
    return without_sigsegv(real_fn, how, set, old);
}

static void report_stats(void) {
    fprintf(stderr, "cpuid_mask[%d]: %lu CPUID instructions answered\n", (int)getpid(), answered);
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
    if (install_handler() != 0) {
        perror("cpuid_mask: sigaction(SIGSEGV)");
        _exit(2);
    }
    /* A process that asked for a mask and silently ran the full CPU would report false numbers. */
    if (set_cpuid_faulting(0) != 0) {
        perror("cpuid_mask: arch_prctl(ARCH_SET_CPUID, 0) (needs a CPU and kernel with CPUID faulting)");
        _exit(2);
    }
    const char *stats = getenv("MAGICSELECTOR_CPUID_STATS");
    if (stats && strcmp(stats, "1") == 0)
        atexit(report_stats);
}
