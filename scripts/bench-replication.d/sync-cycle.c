// sync-cycle: what this disk alone allows a synchronous partnership at QD1, with no software in between.
//
// A QD1 client that flushes after every write (fio --fsync=1) waits, per write, for one cycle. Unreplicated, the
// cycle is the source volume's write (O_DIRECT) and its flush. With a sync partner on the same disk, the partner's
// log must be forced too before the FLUSH is answered: the partner writes the record (a 64-byte header and the
// payload, through the page cache into a log file whose pages are cached, as blockmover's destination log is once
// its initial sync has lapped it) and forces it, beside the source's write and flush; then it applies the record to
// its own volume (O_DIRECT, not forced). This program times both cycles back to back, the partner on its own
// thread woken through a futex, as a partner's receiver is woken by the network, and nothing else: no network, no
// NBD, no CRC. What the second cycle adds to the first is the least a sync partner on this one shared disk adds to
// a write+flush, whatever the software.
//
// usage: sync-cycle SOURCE_VOLUME PARTNER_VOLUME PARTNER_LOG BLOCK_SIZE SECONDS [pin]
//   three fully written files (no holes: no block allocation while timing); the log's pages are read into the
//   page cache first.
//   pin: the source on CPU 0, the partner on CPU 1 (bench-replication --pin's layout).
// prints: "SINGLE_PER_S DUAL_PER_S SINGLE_P50_US DUAL_P50_US"
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RECORD_HEADER_LENGTH 64 // RecordLogDescriptor.RECORD_HEADER_LENGTH

static int volume_a, volume_b, log_b;
static long block_size, volume_blocks, log_length;
static char *payload, *record;
static int pin;
// Cycle numbers: the source publishes `go`, the partner answers with `done`; -1 stops the partner.
static atomic_int go, done;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void on_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
    {
        die("sched_setaffinity");
    }
}

static void wait_while(atomic_int *word, int value)
{
    while (atomic_load(word) == value)
    {
        syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
    }
}

static void publish(atomic_int *word, int value)
{
    atomic_store(word, value);
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void write_fully(int fd, const char *buffer, long length, long offset)
{
    if (pwrite(fd, buffer, length, offset) != length)
    {
        die("pwrite");
    }
}

static void force(int fd)
{
    if (fdatasync(fd) != 0)
    {
        die("fdatasync");
    }
}

static long random_offset(unsigned *seed)
{
    return (long)(rand_r(seed) % volume_blocks) * block_size;
}

static void *partner(void *unused)
{
    (void)unused;
    if (pin)
    {
        on_cpu(1);
    }
    unsigned seed = 2;
    long log_position = 0;
    const long record_length = RECORD_HEADER_LENGTH + block_size;
    for (int seen = 0;;)
    {
        wait_while(&go, seen);
        seen = atomic_load(&go);
        if (seen < 0)
        {
            return NULL;
        }
        if (log_position + record_length > log_length)
        {
            log_position = 0;
        }
        write_fully(log_b, record, record_length, log_position);
        log_position += record_length;
        force(log_b);
        publish(&done, seen);
        write_fully(volume_b, payload, block_size, random_offset(&seed));
    }
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Runs cycles for `seconds`; returns cycles per second and sets *p50 to the median cycle in microseconds.
static double run(int with_partner, double seconds, double *p50)
{
    static double latencies[1 << 22];
    unsigned seed = 1;
    long n = 0;
    const double start = now_us(), end = start + seconds * 1e6;
    double t = start;
    while (t < end && n < (1 << 22))
    {
        const double cycle_start = t;
        const int cycle = with_partner ? atomic_load(&go) + 1 : 0;
        if (with_partner)
        {
            publish(&go, cycle);
        }
        write_fully(volume_a, payload, block_size, random_offset(&seed));
        force(volume_a);
        if (with_partner)
        {
            while (atomic_load(&done) != cycle)
            {
                wait_while(&done, cycle - 1);
            }
        }
        t = now_us();
        latencies[n++] = t - cycle_start;
    }
    qsort(latencies, n, sizeof latencies[0], by_value);
    *p50 = latencies[n / 2];
    return n / ((t - start) / 1e6);
}

static int open_file(const char *path, int flags, long *length)
{
    const int fd = open(path, O_RDWR | flags);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
    {
        die(path);
    }
    *length = st.st_size;
    return fd;
}

int main(int argc, char **argv)
{
    if (argc < 6)
    {
        fprintf(stderr, "usage: sync-cycle SOURCE_VOLUME PARTNER_VOLUME PARTNER_LOG BLOCK_SIZE SECONDS [pin]\n");
        return 2;
    }
    block_size = atol(argv[4]);
    const double seconds = atof(argv[5]);
    pin = argc > 6 && strcmp(argv[6], "pin") == 0;
    long length_a, length_b;
    volume_a = open_file(argv[1], O_DIRECT, &length_a);
    volume_b = open_file(argv[2], O_DIRECT, &length_b);
    log_b = open_file(argv[3], 0, &log_length);
    volume_blocks = (length_a < length_b ? length_a : length_b) / block_size;
    if (volume_blocks < 1 || log_length < 2 * (RECORD_HEADER_LENGTH + block_size))
    {
        fprintf(stderr, "sync-cycle: the files are too small for %ld-byte blocks\n", block_size);
        return 2;
    }
    if (posix_memalign((void **)&payload, 4096, block_size) != 0 ||
        (record = malloc(RECORD_HEADER_LENGTH + block_size)) == NULL)
    {
        die("malloc");
    }
    memset(payload, 0x5a, block_size);
    memset(record, 0xa5, RECORD_HEADER_LENGTH + block_size);
    // The partner's log pages cached, as a destination's log is after its initial sync: otherwise each record's
    // last page, partly written, is first read from the disk.
    char chunk[1 << 16];
    for (long at = 0; at < log_length; at += sizeof chunk)
    {
        if (pread(log_b, chunk, sizeof chunk, at) < 0)
        {
            die("pread");
        }
    }
    if (pin)
    {
        on_cpu(0);
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, partner, NULL) != 0)
    {
        die("pthread_create");
    }
    double single_p50, dual_p50;
    const double single = run(0, seconds, &single_p50);
    const double dual = run(1, seconds, &dual_p50);
    publish(&go, -1);
    pthread_join(thread, NULL);
    printf("%.0f %.0f %.1f %.1f\n", single, dual, single_p50, dual_p50);
    return 0;
}
