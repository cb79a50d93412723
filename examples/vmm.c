// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * vmm.c - a minimal KVM virtual machine monitor whose guest memory is
 * restored lazily from a snapshot, the way Firecracker restores microVMs.
 *
 *   vmm [--socket PATH] [--size MIB] [--image PATH] [--lazy]
 *   vmm --write-mem-file FILE [--size MIB]
 *   vmm --uffd-socket PATH --mem-file FILE
 *
 * Snapshot: the program fills a region (64 MiB by default) with a small
 * guest program and a pattern, computes the checksum the guest should
 * find, and writes the region's image with faultd_checkpoint().
 * Restore: a fresh context restores the image with faultd_restore(), and
 * the region's base becomes the guest's physical memory
 * (KVM_SET_USER_MEMORY_REGION). The vCPU starts at once, before any page
 * is in: each page the guest touches first faults in KVM, whose
 * get_user_pages() waits on the userfaultfd until the page comes from the
 * image - served by the faultd daemon listening on PATH (start it with
 * `faultd --socket PATH`), as Firecracker hands its userfaultfd to a page
 * fault handler process, or, without --socket, by the library in this
 * process. Meanwhile the rest of the image is read in the background
 * (unless --lazy: then pages come in only when touched).
 *
 * The guest runs in 32-bit protected mode with flat segments, no paging
 * and interrupts off. It announces itself on I/O port 0x10, reads the
 * first word of every page of its memory (so that every page comes in
 * through a KVM fault), reports a checksum of those words on port 0x11
 * and halts. The host then checks every byte of the guest's memory
 * against the snapshot. The program prints the time to the guest's first
 * instruction and to its halt, whether both checks pass, and the
 * restore's progress figures.
 *
 * Why one word a page: under PVM (kvm_pvm: KVM in a cloud VM without
 * nested virtualization) a guest that is not a PVM kernel is emulated an
 * instruction at a time, about 1,000 times slower than on hardware; a
 * guest that summed every word would take seconds per 16 MiB there.
 *
 * Firecracker's way (--uffd-socket): --write-mem-file writes the same
 * guest memory as a raw memory file, as Firecracker's snapshots have it.
 * A restore from it does what Firecracker's Uffd memory backend does: the
 * guest memory is anonymous (two regions, back to back in the file, the
 * way Firecracker splits an x86 guest around its MMIO gap, each mapped
 * private at a 2 MiB boundary), the program makes a userfaultfd
 * (O_CLOEXEC|O_NONBLOCK, not user-mode only, UFFD_FEATURE_EVENT_REMOVE),
 * registers both regions for missing faults, connects to the page-fault
 * handler listening on PATH, sends it the regions as the JSON Firecracker
 * sends with the userfaultfd attached, and keeps both open. The handler
 * (any Firecracker page-fault handler serving FILE: `faultd firecracker
 * --socket PATH --mem-file FILE`, or Firecracker's example as
 * `faultd-bench fc-example PATH FILE` has it) serves every page KVM
 * faults on.
 * The checks read FILE with pread().
 *
 * Exit status: 0 the checksum matches, 1 it does not, 2 an error, 77 no
 * usable KVM or userfaultfd here (a test harness counts it as skipped).
 * KVM faults on guest memory from the kernel, so the userfaultfd must not
 * be user-mode only: run as root, or with access to /dev/userfaultfd.
 * x86-64 only (the guest is x86-64 machine code).
 *
 * Build against an installed libfaultd with:
 *   cc vmm.c $(pkg-config --cflags --libs libfaultd) -o vmm
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/kvm.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <linux/userfaultfd.h>
#include <time.h>
#include <unistd.h>

#include <faultd.h>

#define PAGE_SIZE 4096
#define MAX_SIZE_MIB 2048	/* guest addresses stay below 2 GiB */
#define PORT_RUNNING 0x10	/* the guest's first instruction writes here */
#define PORT_CHECKSUM 0x11	/* and its checksum here, as a dword */
#define EXIT_SKIP 77
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

/*
 * The guest, at guest-physical address 0. It runs with ECX = the number of
 * pages of its memory (set by the host, like the rest of the vCPU state a
 * snapshot would carry) and computes a Fletcher-style sum of the first
 * word of each page: s1 is the running sum of the words, s2 the sum of
 * the s1 values, so that the order of the pages counts too.
 */
static const uint8_t guest_code[] = {
	0xe6, PORT_RUNNING,	/* 00: out  0x10, al     ; "running" */
	0x31, 0xc0,		/* 02: xor  eax, eax     ; s2 = 0 */
	0x31, 0xdb,		/* 04: xor  ebx, ebx     ; s1 = 0 */
	0x31, 0xf6,		/* 06: xor  esi, esi     ; address = 0 */
	0x03, 0x1e,		/* 08: add  ebx, [esi]   ; s1 += word */
	0x01, 0xd8,		/* 0a: add  eax, ebx     ; s2 += s1 */
	0x81, 0xc6, 0x00, 0x10, 0x00, 0x00,
				/* 0c: add  esi, 4096    ; next page */
	0x49,			/* 12: dec  ecx */
	0x75, 0xf3,		/* 13: jnz  08           ; -13: the loop */
	0xe7, PORT_CHECKSUM,	/* 15: out  0x11, eax    ; report s2 */
	0xf4,			/* 17: hlt */
};

/* The same sum on the host, over the first word of each of @pages. */
static uint32_t checksum(const uint32_t *mem, size_t pages)
{
	uint32_t s1 = 0, s2 = 0;

	for (size_t p = 0; p < pages; p++) {
		s1 += mem[p * (PAGE_SIZE / 4)];
		s2 += s1;
	}
	return s2;
}

struct options {
	const char *socket;	/* NULL: restore in the process */
	size_t size;		/* bytes */
	const char *image;
	bool lazy;
	const char *write_mem_file;	/* write it and exit */
	const char *uffd_socket;	/* restore as Firecracker does */
	const char *mem_file;		/* from this memory file */
};

struct vm {
	int kvm, fd, vcpu;
	struct kvm_run *run;	/* the vCPU's shared page(s) */
	size_t run_size;
};

struct timing {
	double start;		/* before faultd_restore() */
	double restored;	/* faultd_restore() returned */
	double vm_ready;	/* VM and vCPU set up, first KVM_RUN */
	double first;		/* the guest's first exit (its first insn) */
	double halted;
};

static const char *temp_image; /* removed by die() */

static _Noreturn void die(const char *what, int err)
{
	fprintf(stderr, "vmm: %s: %s\n", what, strerror(err));
	if (temp_image)
		unlink(temp_image);
	exit(2);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------
 * Snapshot: build the guest's memory and write its image.
 */

_Static_assert(sizeof(guest_code) % 4 == 0, "the code is whole words");

/* Word @i of page @p as the snapshot has it: the guest's code at address
 * 0, then a pattern in which every page differs and no word is zero. */
static uint32_t word_of(size_t p, uint32_t i)
{
	uint32_t w;

	if (p == 0 && i < sizeof(guest_code) / 4) {
		memcpy(&w, guest_code + 4 * i, sizeof(w));
		return w;
	}
	return (uint32_t)p * 0x9e3779b9u + i;
}

static void fill_memory(uint32_t *mem, size_t size)
{
	for (size_t p = 0; p < size / PAGE_SIZE; p++)
		for (uint32_t i = 0; i < PAGE_SIZE / 4; i++)
			mem[p * (PAGE_SIZE / 4) + i] = word_of(p, i);
}

/* After the run: how many pages differ from the snapshot. */
static size_t pages_wrong(const uint32_t *mem, size_t size)
{
	size_t wrong = 0;

	for (size_t p = 0; p < size / PAGE_SIZE; p++)
		for (uint32_t i = 0; i < PAGE_SIZE / 4; i++)
			if (mem[p * (PAGE_SIZE / 4) + i] != word_of(p, i)) {
				wrong++;
				break;
			}
	return wrong;
}

/* Returns the checksum the guest must find. */
static uint32_t snapshot(const struct options *o)
{
	struct faultd_region_opts ro = { .size = sizeof(ro),
					 .length = o->size,
					 .name = "guest" };
	struct faultd_region *r;
	struct faultd_ctx *ctx;
	struct stat st;
	uint32_t sum;
	double t;
	int ret;

	ret = faultd_ctx_create(NULL, &ctx);
	if (!ret)
		ret = faultd_region_create(ctx, &ro, &r);
	if (ret < 0)
		die("creating the guest memory", -ret);
	fill_memory(faultd_region_base(r), o->size);
	sum = checksum(faultd_region_base(r), o->size / PAGE_SIZE);
	t = now();
	ret = faultd_checkpoint(r, o->image, NULL);
	if (ret < 0)
		die(o->image, -ret);
	t = now() - t;
	if (stat(o->image, &st) < 0)
		die(o->image, errno);
	printf("snapshot: %zu MiB of guest memory -> %s (%lld MiB) in %.0f ms,"
	       " checksum %08x\n", o->size >> 20, o->image,
	       (long long)st.st_size >> 20, t * 1e3, sum);
	faultd_ctx_destroy(ctx); /* destroys the region too */
	return sum;
}

/* ------------------------------------------------------------------------
 * The VM.
 */

/* /dev/kvm, or exit 77 with the reason: no KVM here is not an error. */
static int kvm_open(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int version;

	if (fd < 0) {
		fprintf(stderr, "vmm: cannot open /dev/kvm: %s; skipped\n",
			strerror(errno));
		exit(EXIT_SKIP);
	}
	version = ioctl(fd, KVM_GET_API_VERSION, 0);
	if (version != KVM_API_VERSION) {
		fprintf(stderr, "vmm: KVM API version %d, not %d; skipped\n",
			version, KVM_API_VERSION);
		exit(EXIT_SKIP);
	}
	return fd;
}

/* Guest memory: @n pieces, one after the other from physical address 0. */
struct guest_mem {
	unsigned int n;
	struct {
		void *base;
		size_t size;
	} r[2];
};

/* A VM whose physical memory, from address 0, is @m. */
static void vm_create(struct vm *vm, const struct guest_mem *m)
{
	struct kvm_userspace_memory_region slot = { 0 };
	int run_size;

	vm->fd = ioctl(vm->kvm, KVM_CREATE_VM, 0);
	if (vm->fd < 0)
		die("KVM_CREATE_VM", errno);
	for (unsigned int i = 0; i < m->n; i++) {
		slot.slot = i;
		slot.memory_size = m->r[i].size;
		slot.userspace_addr = (uintptr_t)m->r[i].base;
		if (ioctl(vm->fd, KVM_SET_USER_MEMORY_REGION, &slot) < 0)
			die("KVM_SET_USER_MEMORY_REGION", errno);
		slot.guest_phys_addr += m->r[i].size;
	}
	vm->vcpu = ioctl(vm->fd, KVM_CREATE_VCPU, 0);
	if (vm->vcpu < 0)
		die("KVM_CREATE_VCPU", errno);
	run_size = ioctl(vm->kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (run_size < 0)
		die("KVM_GET_VCPU_MMAP_SIZE", errno);
	vm->run_size = (size_t)run_size;
	vm->run = mmap(NULL, vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		       vm->vcpu, 0);
	if (vm->run == MAP_FAILED)
		die("mmap of the vCPU", errno);
}

/*
 * 32-bit protected mode, flat 4 GiB segments, no paging, interrupts off,
 * at the guest's entry with ECX = @pages. KVM loads the segments' hidden
 * parts from these descriptors, so the guest needs no GDT as long as it
 * never reloads a segment register; with interrupts off it needs no IDT.
 */
static void vcpu_init(struct vm *vm, size_t pages)
{
	struct kvm_segment seg = { .limit = 0xffffffff, .present = 1,
				   .s = 1, .db = 1, .g = 1 };
	struct kvm_regs regs = { .rip = 0, .rcx = pages, .rflags = 0x2 };
	struct kvm_sregs sregs;

	if (ioctl(vm->vcpu, KVM_GET_SREGS, &sregs) < 0)
		die("KVM_GET_SREGS", errno);
	seg.selector = 0x10;
	seg.type = 0x3; /* data, read/write, accessed */
	sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = seg;
	seg.selector = 0x08;
	seg.type = 0xb; /* code, execute/read, accessed */
	sregs.cs = seg;
	sregs.cr0 |= 0x1; /* PE */
	if (ioctl(vm->vcpu, KVM_SET_SREGS, &sregs) < 0)
		die("KVM_SET_SREGS", errno);
	if (ioctl(vm->vcpu, KVM_SET_REGS, &regs) < 0)
		die("KVM_SET_REGS", errno);
}

static void vm_destroy(struct vm *vm)
{
	munmap(vm->run, vm->run_size);
	close(vm->vcpu);
	close(vm->fd);
}

/* An OUT the guest made: 1 when it was the checksum. */
static int guest_out(struct vm *vm, struct timing *t, uint32_t *sum)
{
	const struct kvm_run *run = vm->run;
	const uint8_t *data = (const uint8_t *)run + run->io.data_offset;

	if (run->io.direction == KVM_EXIT_IO_OUT &&
	    run->io.port == PORT_RUNNING) {
		t->first = now();
		return 0;
	}
	if (run->io.direction == KVM_EXIT_IO_OUT &&
	    run->io.port == PORT_CHECKSUM && run->io.size == 4) {
		memcpy(sum, data, sizeof(*sum));
		return 1;
	}
	fprintf(stderr, "vmm: unexpected I/O: %s port %#x, %u bytes\n",
		run->io.direction == KVM_EXIT_IO_OUT ? "out" : "in",
		run->io.port, run->io.size);
	exit(2);
}

static void guest_failed(const struct kvm_run *run)
{
	fprintf(stderr, "vmm: the guest stopped: exit reason %u", run->exit_reason);
	if (run->exit_reason == KVM_EXIT_SHUTDOWN)
		fprintf(stderr, " (shutdown: a triple fault)");
	if (run->exit_reason == KVM_EXIT_INTERNAL_ERROR)
		fprintf(stderr, " (internal error %u)", run->internal.suberror);
	if (run->exit_reason == KVM_EXIT_FAIL_ENTRY)
		fprintf(stderr, " (entry failed: %#llx)", (unsigned long long)
			run->fail_entry.hardware_entry_failure_reason);
	fprintf(stderr, "\n");
	exit(2);
}

/*
 * Run the vCPU until the guest halts. Returns 0 with the guest's checksum
 * in *sum, or 1 if it halted without reporting one.
 */
static int vm_run(struct vm *vm, struct timing *t, uint32_t *sum)
{
	bool reported = false;

	for (;;) {
		if (ioctl(vm->vcpu, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			/* What KVM says when a fault on guest memory fails,
			 * as one on user-mode-only userfaultfd memory does. */
			die("KVM_RUN", errno);
		}
		switch (vm->run->exit_reason) {
		case KVM_EXIT_IO:
			reported |= guest_out(vm, t, sum);
			break;
		case KVM_EXIT_HLT:
			t->halted = now();
			return reported ? 0 : 1;
		default:
			guest_failed(vm->run);
		}
	}
}

/* ------------------------------------------------------------------------
 * Restore: the image becomes the guest's memory; run the guest.
 */

static struct faultd_region *restore(struct faultd_ctx *ctx,
				     const struct options *o)
{
	struct faultd_restore_opts ro = {
		.size = sizeof(ro),
		.socket = o->socket,
		.name = "guest",
	};
	struct faultd_region *r;
	int ret;

	ro.flags = o->socket ? FAULTD_RESTORE_DAEMON : 0;
	if (o->lazy)
		ro.flags |= FAULTD_RESTORE_LAZY;
	ret = faultd_restore(ctx, o->image, &ro, &r);
	if (o->socket && (ret == -ENOENT || ret == -ECONNREFUSED)) {
		fprintf(stderr, "vmm: no faultd daemon on %s (start one with "
				"`faultd --socket %s`): %s\n",
			o->socket, o->socket, strerror(-ret));
		exit(2);
	}
	if (ret < 0)
		die(o->image, -ret);
	return r;
}

static void print_progress(const char *when, struct faultd_region *r)
{
	struct faultd_restore_progress p = { .size = sizeof(p) };
	int ret = faultd_restore_progress(r, &p);

	if (ret < 0)
		die("faultd_restore_progress", -ret);
	printf("  %s: %llu of %llu pages for faults, %llu in the background; "
	       "%llu faults, p50 %.1f us, p99 %.1f us; %s%s\n", when,
	       (unsigned long long)p.pages_urgent,
	       (unsigned long long)p.pages_total,
	       (unsigned long long)p.pages_background,
	       (unsigned long long)p.faults, (double)p.p50_ns / 1e3,
	       (double)p.p99_ns / 1e3, p.done ? "all in" : "not all in yet",
	       p.daemon_died ? " (the daemon died: finished here)" : "");
}

static void print_timing(const struct options *o, const struct timing *t)
{
	double run = t->halted - t->vm_ready;

	printf("restore (%s): %s %.2f ms, VM set up %.2f ms\n"
	       "  first guest instruction %.2f ms after the restore began\n"
	       "  guest halted %.1f ms after it (run %.1f ms: %.0f MiB/s "
	       "read by the guest)\n",
	       o->uffd_socket ? "through a Firecracker page-fault handler" :
	       o->socket ? "through the faultd daemon" : "in the process",
	       o->uffd_socket ? "memory and handshake" : "faultd_restore()",
	       (t->restored - t->start) * 1e3,
	       (t->vm_ready - t->restored) * 1e3,
	       (t->first - t->start) * 1e3, (t->halted - t->start) * 1e3,
	       run * 1e3, (double)(o->size >> 20) / run);
}

/*
 * Restore, run the guest, then check its memory. Returns 0 with the
 * guest's checksum in *sum and the number of pages that differ from the
 * snapshot in *wrong, 1 if the guest halted without a checksum.
 */
static int restore_and_run(const struct options *o, int kvm, uint32_t *sum,
			   size_t *wrong)
{
	struct timing t = { 0 };
	struct vm vm = { .kvm = kvm };
	struct faultd_region *r;
	struct faultd_ctx *ctx;
	struct guest_mem m = { .n = 1 };
	int ret;

	ret = faultd_ctx_create(NULL, &ctx);
	if (ret < 0)
		die("faultd_ctx_create", -ret);
	t.start = now();
	r = restore(ctx, o);
	t.restored = now();
	m.r[0].base = faultd_region_base(r);
	m.r[0].size = faultd_region_size(r);
	vm_create(&vm, &m);
	vcpu_init(&vm, faultd_region_size(r) / PAGE_SIZE);
	t.vm_ready = now();
	ret = vm_run(&vm, &t, sum);
	print_timing(o, &t);
	print_progress("at the halt", r);
	if (!o->lazy) {
		faultd_restore_wait(r);
		print_progress("after faultd_restore_wait()", r);
	}
	*wrong = pages_wrong(faultd_region_base(r), faultd_region_size(r));
	vm_destroy(&vm); /* before the memory it maps goes */
	faultd_ctx_destroy(ctx);
	return ret;
}

/* ------------------------------------------------------------------------
 * Firecracker's way: a memory file, and a page-fault handler that gets
 * the guest memory's userfaultfd over a Unix socket.
 */

#define FC_ALIGN (2ul << 20)	/* Firecracker aligns guest memory so */

/* --write-mem-file: the snapshot's guest memory, raw. */
static void write_mem_file(const struct options *o)
{
	uint32_t *mem = malloc(o->size), sum;
	int fd = open(o->write_mem_file, O_WRONLY | O_CREAT | O_TRUNC |
				      O_CLOEXEC, 0644);

	if (!mem)
		die("malloc", ENOMEM);
	if (fd < 0)
		die(o->write_mem_file, errno);
	fill_memory(mem, o->size);
	sum = checksum(mem, o->size / PAGE_SIZE);
	if (write(fd, mem, o->size) != (ssize_t)o->size || close(fd))
		die(o->write_mem_file, errno);
	printf("memory file: %zu MiB of guest memory -> %s, checksum %08x\n",
	       o->size >> 20, o->write_mem_file, sum);
	free(mem);
}

/* Anonymous private memory at a 2 MiB boundary: a PROT_NONE reservation
 * trimmed to it, then the memory mapped over it, as Firecracker does. */
static void *fc_map(size_t size)
{
	size_t alloc = size + FC_ALIGN - PAGE_SIZE, head, tail;
	uint8_t *p, *a;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

	p = mmap(NULL, alloc, PROT_NONE, flags, -1, 0);
	if (p == MAP_FAILED)
		die("mmap of guest memory", errno);
	a = (uint8_t *)(((uintptr_t)p + FC_ALIGN - 1) & ~(FC_ALIGN - 1));
	head = (size_t)(a - p);
	tail = alloc - head - size;
	if ((head && munmap(p, head)) || (tail && munmap(a + size, tail)))
		die("munmap", errno);
	if (mmap(a, size, PROT_READ | PROT_WRITE, flags | MAP_FIXED, -1, 0) !=
	    a)
		die("mmap of guest memory", errno);
	return a;
}

/* /dev/userfaultfd where it exists, else the system call. Not user-mode
 * only: KVM's faults on guest memory are the kernel's. */
static int fc_uffd(void)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_EVENT_REMOVE };
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), fd = -1;

	if (dev >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
		close(dev);
	} else if (errno == ENOENT) {
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	}
	if (fd < 0) {
		fprintf(stderr, "vmm: no userfaultfd for kernel faults: %s; "
				"skipped\n", strerror(errno));
		exit(EXIT_SKIP);
	}
	if (ioctl(fd, UFFDIO_API, &api) < 0)
		die("UFFDIO_API", errno);
	return fd;
}

static void fc_register(int uffd, void *base, size_t size)
{
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)base, .len = size },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
		die("UFFDIO_REGISTER", errno);
}

/* What serde_json writes for Firecracker's GuestRegionUffdMapping list. */
static size_t fc_json(const struct guest_mem *m, char *buf, size_t cap)
{
	size_t len = 0, off = 0;

	len += (size_t)snprintf(buf, cap, "[");
	for (unsigned int i = 0; i < m->n; i++) {
		len += (size_t)snprintf(buf + len, cap - len,
			"%s{\"base_host_virt_addr\":%llu,\"size\":%zu,"
			"\"offset\":%zu,\"page_size\":%d,\"page_size_kib\":"
			"%d}", i ? "," : "",
			(unsigned long long)(uintptr_t)m->r[i].base,
			m->r[i].size, off, PAGE_SIZE, PAGE_SIZE);
		off += m->r[i].size;
	}
	len += (size_t)snprintf(buf + len, cap - len, "]");
	return len;
}

/* Connect to the handler and make the one sendmsg(): the JSON, the
 * userfaultfd attached. The socket stays open: returned. */
static int fc_handshake(const char *path, const struct guest_mem *m, int uffd)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char json[512], ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = json };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl,
			      .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	iov.iov_len = fc_json(m, json, sizeof(json));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &uffd, sizeof(uffd));
	if (strlen(path) >= sizeof(a.sun_path))
		die(path, ENAMETOOLONG);
	strcpy(a.sun_path, path);
	if (sock < 0 || connect(sock, (struct sockaddr *)&a, sizeof(a))) {
		fprintf(stderr, "vmm: no page-fault handler on %s: %s\n", path,
			strerror(errno));
		exit(2);
	}
	if (sendmsg(sock, &msg, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
		die("sendmsg", errno);
	return sock;
}

static void fc_pread(int fd, void *buf, size_t len, off_t off)
{
	if (pread(fd, buf, len, off) != (ssize_t)len)
		die("reading the memory file", errno ? errno : EIO);
}

/* The guest's checksum as the memory file has it. */
static uint32_t fc_file_checksum(int fd, size_t size)
{
	uint32_t s1 = 0, s2 = 0, w;

	for (size_t p = 0; p < size / PAGE_SIZE; p++) {
		fc_pread(fd, &w, sizeof(w), (off_t)(p * PAGE_SIZE));
		s1 += w;
		s2 += s1;
	}
	return s2;
}

/* After the run: the pages of guest memory that differ from the file. */
static size_t fc_pages_wrong(int fd, const struct guest_mem *m)
{
	char page[PAGE_SIZE];
	size_t wrong = 0;
	off_t off = 0;

	for (unsigned int i = 0; i < m->n; i++)
		for (size_t at = 0; at < m->r[i].size; at += PAGE_SIZE) {
			fc_pread(fd, page, PAGE_SIZE, off);
			wrong += !!memcmp((char *)m->r[i].base + at, page,
					  PAGE_SIZE);
			off += PAGE_SIZE;
		}
	return wrong;
}

/* --uffd-socket: restore from the memory file through the handler. */
static int fc_restore_and_run(const struct options *o, int kvm)
{
	struct guest_mem m = { .n = 2 };
	struct timing t = { 0 };
	struct vm vm = { .kvm = kvm };
	int fd = open(o->mem_file, O_RDONLY | O_CLOEXEC), uffd, sock, ret;
	uint32_t want, got = 0;
	struct stat st;
	size_t size, wrong;

	if (fd < 0 || fstat(fd, &st))
		die(o->mem_file, errno);
	size = (size_t)st.st_size;
	if (size < 2 * PAGE_SIZE || size % PAGE_SIZE ||
	    size > (size_t)MAX_SIZE_MIB << 20)
		die(o->mem_file, EINVAL);
	want = fc_file_checksum(fd, size);
	m.r[0].size = size / 2 / PAGE_SIZE * PAGE_SIZE;
	m.r[1].size = size - m.r[0].size;
	t.start = now();
	for (unsigned int i = 0; i < m.n; i++)
		m.r[i].base = fc_map(m.r[i].size);
	uffd = fc_uffd();
	for (unsigned int i = 0; i < m.n; i++)
		fc_register(uffd, m.r[i].base, m.r[i].size);
	sock = fc_handshake(o->uffd_socket, &m, uffd);
	t.restored = now();
	vm_create(&vm, &m);
	vcpu_init(&vm, size / PAGE_SIZE);
	t.vm_ready = now();
	ret = vm_run(&vm, &t, &got);
	print_timing(o, &t);
	wrong = fc_pages_wrong(fd, &m);
	vm_destroy(&vm);
	if (ret) {
		fprintf(stderr, "vmm: the guest halted without a checksum\n");
		return 1;
	}
	printf("checksum: guest %08x, memory file %08x: %s\n", got, want,
	       got == want ? "match" : "MISMATCH");
	printf("memory: %zu of %zu pages differ from the memory file\n",
	       wrong, size / PAGE_SIZE);
	close(sock);
	close(uffd);
	close(fd);
	return got == want && !wrong ? 0 : 1;
}

/* ------------------------------------------------------------------------
 * Options and main().
 */

static int parse(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "size", required_argument, NULL, 'm' },
		{ "image", required_argument, NULL, 'i' },
		{ "lazy", no_argument, NULL, 'l' },
		{ "write-mem-file", required_argument, NULL, 'w' },
		{ "uffd-socket", required_argument, NULL, 'u' },
		{ "mem-file", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long mib = o->size >> 20;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'm': mib = strtoul(optarg, &end, 10);
			  if (*end || !mib || mib > MAX_SIZE_MIB)
				  return -1;
			  break;
		case 'i': o->image = optarg; break;
		case 'l': o->lazy = true; break;
		case 'w': o->write_mem_file = optarg; break;
		case 'u': o->uffd_socket = optarg; break;
		case 'f': o->mem_file = optarg; break;
		default: return -1;
		}
	}
	o->size = mib << 20;
	/* Firecracker's way takes a memory file, and none of the rest. */
	if (o->uffd_socket && (!o->mem_file || o->socket || o->image ||
			       o->lazy || o->write_mem_file))
		return -1;
	if (o->mem_file && !o->uffd_socket)
		return -1;
	return optind == argc ? 0 : -1;
}

/* With userfaultfd missing or refused here, there is nothing to show. */
static void check_userfaultfd(void)
{
	struct faultd_features f = { .size = sizeof(f) };
	int ret = faultd_probe(&f);

	if (ret == -ENOSYS || ret == -EPERM) {
		fprintf(stderr, "vmm: no userfaultfd: %s; skipped\n",
			strerror(-ret));
		exit(EXIT_SKIP);
	}
}

int main(int argc, char **argv)
{
	struct options o = { .size = 64ul << 20 };
	char tmp[] = "/var/tmp/vmm-XXXXXX";
	uint32_t want, got = 0;
	size_t wrong = 0;
	int kvm, fd, ret;

	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: vmm [--socket PATH] [--size MIB (1-%d)]"
				" [--image PATH] [--lazy]\n"
				"       vmm --write-mem-file FILE [--size MIB]\n"
				"       vmm --uffd-socket PATH --mem-file FILE\n",
			MAX_SIZE_MIB);
		return 2;
	}
	if (o.write_mem_file) {
		write_mem_file(&o);
		return 0;
	}
	kvm = kvm_open();
	if (o.uffd_socket) {
		ret = fc_restore_and_run(&o, kvm);
		close(kvm);
		return ret;
	}
	check_userfaultfd();
	if (!o.image) {
		fd = mkstemp(tmp);
		if (fd < 0)
			die(tmp, errno);
		close(fd);
		o.image = temp_image = tmp;
	}
	want = snapshot(&o);
	ret = restore_and_run(&o, kvm, &got, &wrong);
	close(kvm);
	if (temp_image)
		unlink(temp_image);
	if (ret) {
		fprintf(stderr, "vmm: the guest halted without a checksum\n");
		return 1;
	}
	printf("checksum: guest %08x, snapshot %08x: %s\n", got, want,
	       got == want ? "match" : "MISMATCH");
	printf("memory: %zu of %zu pages differ from the snapshot\n", wrong,
	       o.size / PAGE_SIZE);
	return got == want && !wrong ? 0 : 1;
}
