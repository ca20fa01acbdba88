// SPDX-License-Identifier: GPL-2.0-only
/*
 * tcp_westwood_tb: instrumented TCP Westwood+ for the cc-testbed.
 *
 * One module, two congestion controls, registered beside the stock
 * "westwood" so that flows can mix all three (a second "westwood" would
 * fail with -EEXIST):
 *
 *   westwood_ml     the decisions of net/ipv4/tcp_westwood.c (the file is
 *                   identical in 6.1 and 6.12). The first half of this file
 *                   keeps mainline's structure and names, so a diff against
 *                   it shows only the instrumentation.
 *   westwood_paper  Westwood+ as the papers specify it (paper 000, section
 *                   2.1 "The algorithm" and 2.2 "The end-to-end bandwidth
 *                   estimate"): one sample per RTT of the data the receiver
 *                   got, BWE filtered with alpha = 0.9 (eq. 1), RTT in us,
 *                   ssthresh = cwnd = BWE*RTTmin at 3 DUPACKs and
 *                   ssthresh = BWE*RTTmin, cwnd = 1 at a coarse timeout.
 *
 * Both emit westwood_tb:westwood_tb_sample and westwood_tb:westwood_tb_cong
 * (westwood_tb_trace.h) and export the estimate through inet_diag, so that
 * `ss -tin` prints it as bbr:(bw:...,mrtt:...). README.md has the details.
 *
 * Where the congestion events are seen: Linux asks ->ssthresh() when it
 * enters fast recovery, CWR or an RTO, and calls ->set_state() right after
 * the new ssthresh (and, for an RTO, the new cwnd) are in place. The cong
 * event is therefore emitted from ->set_state(), with the "before" values
 * noted in ->ssthresh(). COMPLETE_CWR and undo have hooks of their own.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 10, 0)
#error "tcp_westwood_tb needs Linux 5.10 or newer (built and checked on 6.1 and 6.12)"
#endif

#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/skbuff.h>
#include <linux/inet_diag.h>
#include <linux/math64.h>
#include <net/tcp.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 19, 0)
/* tcp_snd_cwnd()/tcp_snd_cwnd_set() arrived in 5.19 and were backported to
 * some stable series only: shadow them with macros instead of redefining.
 */
#define tcp_snd_cwnd(tp)		((tp)->snd_cwnd)
#define tcp_snd_cwnd_set(tp, val)	((tp)->snd_cwnd = (val))
#endif

/* No ->cong_control on purpose, although its signature is the one CC API
 * difference between 6.1 (sk, rs) and 6.10+ (sk, ack, flag, rs): a CC with
 * ->cong_control takes cwnd away from PRR, skips tcp_end_cwnd_reduction()'s
 * cwnd = ssthresh and CA_EVENT_COMPLETE_CWR, and disables the restart after
 * idle. Mainline westwood has none, and the paper variant must run on the
 * same machinery to be comparable. ->pkts_acked, ->in_ack_event,
 * ->cwnd_event, ->set_state, ->undo_cwnd and ->get_info are the same in
 * 5.10, 6.1 and 6.12.
 */

#define CREATE_TRACE_POINTS
#include "westwood_tb_trace.h"

#ifndef WESTWOOD_TB_VERSION
#define WESTWOOD_TB_VERSION "unknown"	/* Kbuild passes the content of VERSION */
#endif

/* ------------------------------------------------------------------------ */
/* Module parameters: validated at load (insmod refuses out-of-range values
 * with -EINVAL) and on every write to /sys/module/tcp_westwood_tb/parameters.
 */

static unsigned int paper_alpha_permille = 900;
static unsigned int min_cwnd_segs = 2;
static unsigned int ml_min_win_ms = 50;
static bool diag_vegas;

static int wtb_param_set_range(const char *val, const struct kernel_param *kp,
			       unsigned int lo, unsigned int hi)
{
	unsigned int n;
	int ret;

	ret = kstrtouint(val, 0, &n);
	if (ret)
		return ret;
	if (n < lo || n > hi) {
		pr_err("%s=%u is out of range %u..%u\n", kp->name, n, lo, hi);
		return -EINVAL;
	}
	WRITE_ONCE(*(unsigned int *)kp->arg, n);
	return 0;
}

static int paper_alpha_set(const char *val, const struct kernel_param *kp)
{
	return wtb_param_set_range(val, kp, 1, 999);
}

static int min_cwnd_set(const char *val, const struct kernel_param *kp)
{
	return wtb_param_set_range(val, kp, 1, 100);
}

static int ml_min_win_set(const char *val, const struct kernel_param *kp)
{
	return wtb_param_set_range(val, kp, 10, 1000);
}

static const struct kernel_param_ops paper_alpha_ops = {
	.set = paper_alpha_set,
	.get = param_get_uint,
};

static const struct kernel_param_ops min_cwnd_ops = {
	.set = min_cwnd_set,
	.get = param_get_uint,
};

static const struct kernel_param_ops ml_min_win_ops = {
	.set = ml_min_win_set,
	.get = param_get_uint,
};

module_param_cb(paper_alpha_permille, &paper_alpha_ops, &paper_alpha_permille, 0644);
MODULE_PARM_DESC(paper_alpha_permille,
		 "westwood_paper: filter gain alpha of BWE_k = alpha*BWE_k-1 + (1-alpha)*b_k (paper 000 eq. 1), in 1/1000 (default 900 = 0.9, range 1..999)");

module_param_cb(min_cwnd_segs, &min_cwnd_ops, &min_cwnd_segs, 0644);
MODULE_PARM_DESC(min_cwnd_segs,
		 "both variants: floor of ssthresh/cwnd set from BWE*RTTmin, in segments (default 2 as mainline and paper 000 sec. 2.1, range 1..100)");

module_param_cb(ml_min_win_ms, &ml_min_win_ops, &ml_min_win_ms, 0644);
MODULE_PARM_DESC(ml_min_win_ms,
		 "westwood_ml: shortest bandwidth sampling window in ms, mainline's TCP_WESTWOOD_RTT_MIN = HZ/20 (default 50, range 10..1000)");

module_param(diag_vegas, bool, 0644);
MODULE_PARM_DESC(diag_vegas,
		 "answer ss -i (INET_DIAG_VEGASINFO) with tcpvegas_info as mainline does, estimate in tcpv_rttcnt as kbit/s, instead of BBR-style bw/mrtt (default N)");

/* ------------------------------------------------------------------------ */
/* Shared by both variants: trace bookkeeping and inet_diag export. */

/* cwnd and ssthresh when the stack asked ->ssthresh() for a reduction; the
 * event goes out from ->set_state(), which follows once the new values are
 * set (tcp_enter_recovery(), tcp_enter_cwr(), tcp_process_tlp_ack(),
 * tcp_enter_loss()).
 */
struct wtb_cong_note {
	u32	cwnd;
	u32	ssthresh;
	u8	pending;
};

static void wtb_note_reduction(struct sock *sk, struct wtb_cong_note *note)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	note->cwnd = tcp_snd_cwnd(tp);
	note->ssthresh = tp->snd_ssthresh;
	note->pending = 1;
}

static void wtb_trace_cong(struct sock *sk, u8 variant, u8 kind,
			   u32 cwnd_before, u32 ssthresh_before,
			   u64 est_Bps, u32 rtt_min_us)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	trace_westwood_tb_cong(sk, variant, kind, cwnd_before, tcp_snd_cwnd(tp),
			       ssthresh_before, tp->snd_ssthresh, est_Bps,
			       rtt_min_us);
}

/* ->set_state() runs before icsk_ca_state changes. */
static void wtb_trace_state(struct sock *sk, struct wtb_cong_note *note,
			    u8 variant, u8 new_state, u64 est_Bps, u32 rtt_min_us)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	u8 kind;

	switch (new_state) {
	case TCP_CA_Recovery:
		kind = WTB_CONG_RECOVERY;
		break;
	case TCP_CA_CWR:
		kind = WTB_CONG_CWR;
		break;
	case TCP_CA_Loss:
		kind = note->pending ? WTB_CONG_LOSS : WTB_CONG_LOSS_REPEAT;
		break;
	default:
		note->pending = 0;
		return;
	}

	if (!note->pending) {
		/* No reduction this time (recovery entered from CWR, or an RTO
		 * inside the same loss episode). For an RTO Linux has already
		 * reset cwnd, so the cwnd before is unknown: report 0.
		 */
		note->cwnd = kind == WTB_CONG_LOSS_REPEAT ? 0 : tcp_snd_cwnd(tp);
		note->ssthresh = tp->snd_ssthresh;
	}
	wtb_trace_cong(sk, variant, kind, note->cwnd, note->ssthresh, est_Bps,
		       rtt_min_us);
	note->pending = 0;
}

/* Called from ->undo_cwnd(): tcp_undo_cwnd_reduction() sets cwnd to the value
 * returned and then raises ssthresh to prior_ssthresh; it only gets here when
 * prior_ssthresh is set.
 */
static void wtb_trace_undo(struct sock *sk, u8 variant, u32 cwnd_after,
			   u64 est_Bps, u32 rtt_min_us)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	trace_westwood_tb_cong(sk, variant, WTB_CONG_UNDO,
			       tcp_snd_cwnd(tp), cwnd_after,
			       tp->snd_ssthresh,
			       max(tp->prior_ssthresh, tp->snd_ssthresh),
			       est_Bps, rtt_min_us);
}

/* inet_diag can carry one CC attribute. `ss -i` only ever asks for
 * INET_DIAG_VEGASINFO (the request bitmap is 8 bits; BBR answers that request
 * with INET_DIAG_BBRINFO too), getsockopt(TCP_CC_INFO) asks for everything.
 * BBR-style info is the only one ss prints a bandwidth from:
 *   bbr:(bw:<est_Bps*8>bps,mrtt:<rtt_min_us/1000>)
 * pacing_gain and cwnd_gain stay 0 so that ss omits them.
 */
static size_t wtb_get_info(u32 ext, int *attr, union tcp_cc_info *info,
			   u64 est_Bps, u32 rtt_us, u32 rtt_min_us)
{
	bool want_vegas = ext & (1 << (INET_DIAG_VEGASINFO - 1));
	bool want_bbr = ext & (1 << (INET_DIAG_BBRINFO - 1));

	if (want_vegas && READ_ONCE(diag_vegas)) {
		info->vegas.tcpv_enabled = 1;
		/* Not a count of RTTs here: the estimate in kbit/s. */
		info->vegas.tcpv_rttcnt = min_t(u64, div_u64(est_Bps * 8, 1000),
						U32_MAX);
		info->vegas.tcpv_rtt = rtt_us;
		info->vegas.tcpv_minrtt = rtt_min_us;
		*attr = INET_DIAG_VEGASINFO;
		return sizeof(struct tcpvegas_info);
	}
	if (want_vegas || want_bbr) {
		info->bbr.bbr_bw_lo = (u32)est_Bps;
		info->bbr.bbr_bw_hi = (u32)(est_Bps >> 32);
		info->bbr.bbr_min_rtt = rtt_min_us;
		info->bbr.bbr_pacing_gain = 0;
		info->bbr.bbr_cwnd_gain = 0;
		*attr = INET_DIAG_BBRINFO;
		return sizeof(struct tcp_bbr_info);
	}
	return 0;
}

/* ======================================================================== */
/* westwood_ml: net/ipv4/tcp_westwood.c with trace points.
 *
 * Deliberate differences, none of which changes a decision at the default
 * parameters: HZ/20 is ml_min_win_ms * HZ / 1000 (equal for 50 ms at every
 * HZ), the floor 2 is min_cwnd_segs, ->ssthresh and ->undo_cwnd wrap the
 * Reno functions to note values for the trace, ->set_state exists only to
 * emit events, and ->get_info also exports bw_est.
 */

/* TCP Westwood structure */
struct westwood {
	u32    bw_ns_est;        /* first bandwidth estimation..not too smoothed 8) */
	u32    bw_est;           /* bandwidth estimate */
	u32    rtt_win_sx;       /* here starts a new evaluation... */
	u32    bk;
	u32    snd_una;          /* used for evaluating the number of acked bytes */
	u32    cumul_ack;
	u32    accounted;
	u32    rtt;
	u32    rtt_min;          /* minimum observed RTT */
	u8     first_ack;        /* flag which infers that this is the first ack */
	u8     reset_rtt_min;    /* Reset RTT min to next RTT sample*/
	struct wtb_cong_note note;
};

/* TCP Westwood functions and constants */
#define TCP_WESTWOOD_INIT_RTT  (20*HZ)	/* maybe too conservative?! */

/* Mainline: #define TCP_WESTWOOD_RTT_MIN (HZ/20). Truncating like HZ/20 does
 * keeps the default exact at any HZ (msecs_to_jiffies() rounds up: 13 != 12
 * at HZ=250).
 */
static inline u32 westwood_rtt_min_jiffies(void)
{
	return READ_ONCE(ml_min_win_ms) * HZ / 1000;
}

/* bw_est is in bytes per jiffy */
static inline u64 westwood_est_Bps(const struct westwood *w)
{
	return (u64)w->bw_est * HZ;
}

/*
 * @tcp_westwood_create
 * This function initializes fields used in TCP Westwood+,
 * it is called after the initial SYN, so the sequence numbers
 * are correct but new passive connections we have no
 * information about RTTmin at this time so we simply set it to
 * TCP_WESTWOOD_INIT_RTT. This value was chosen to be too conservative
 * since in this way we're sure it will be updated in a consistent
 * way as soon as possible. It will reasonably happen within the first
 * RTT period of the connection lifetime.
 */
static void tcp_westwood_init(struct sock *sk)
{
	struct westwood *w = inet_csk_ca(sk);

	w->bk = 0;
	w->bw_ns_est = 0;
	w->bw_est = 0;
	w->accounted = 0;
	w->cumul_ack = 0;
	w->reset_rtt_min = 1;
	w->rtt_min = w->rtt = TCP_WESTWOOD_INIT_RTT;
	w->rtt_win_sx = tcp_jiffies32;
	w->snd_una = tcp_sk(sk)->snd_una;
	w->first_ack = 1;
	w->note.pending = 0;
}

/*
 * @westwood_do_filter
 * Low-pass filter. Implemented using constant coefficients.
 */
static inline u32 westwood_do_filter(u32 a, u32 b)
{
	return ((7 * a) + b) >> 3;
}

static void westwood_filter(struct westwood *w, u32 delta)
{
	/* If the filter is empty fill it with the first sample of bandwidth  */
	if (w->bw_ns_est == 0 && w->bw_est == 0) {
		w->bw_ns_est = w->bk / delta;
		w->bw_est = w->bw_ns_est;
	} else {
		w->bw_ns_est = westwood_do_filter(w->bw_ns_est, w->bk / delta);
		w->bw_est = westwood_do_filter(w->bw_est, w->bw_ns_est);
	}
}

/* The raw sample is reported as the filter saw it: bk / delta in bytes per
 * jiffy (integer division), times HZ.
 */
static void westwood_trace_sample(struct sock *sk, const struct westwood *w,
				  u32 delta)
{
	trace_westwood_tb_sample(sk, WTB_VARIANT_ML, w->bk,
				 jiffies_to_usecs(delta),
				 (u64)(w->bk / delta) * HZ,
				 westwood_est_Bps(w),
				 jiffies_to_usecs(w->rtt),
				 jiffies_to_usecs(w->rtt_min));
}

/*
 * @westwood_pkts_acked
 * Called after processing group of packets.
 * but all westwood needs is the last sample of srtt.
 */
static void tcp_westwood_pkts_acked(struct sock *sk,
				    const struct ack_sample *sample)
{
	struct westwood *w = inet_csk_ca(sk);

	if (sample->rtt_us > 0)
		w->rtt = usecs_to_jiffies(sample->rtt_us);
}

/*
 * @westwood_update_window
 * It updates RTT evaluation window if it is the right moment to do
 * it. If so it calls filter for evaluating bandwidth.
 */
static void westwood_update_window(struct sock *sk)
{
	struct westwood *w = inet_csk_ca(sk);
	s32 delta = tcp_jiffies32 - w->rtt_win_sx;

	/* Initialize w->snd_una with the first acked sequence number in order
	 * to fix mismatch between tp->snd_una and w->snd_una for the first
	 * bandwidth sample
	 */
	if (w->first_ack) {
		w->snd_una = tcp_sk(sk)->snd_una;
		w->first_ack = 0;
	}

	/*
	 * See if a RTT-window has passed.
	 * Be careful since if RTT is less than
	 * 50ms we don't filter but we continue 'building the sample'.
	 * This minimum limit was chosen since an estimation on small
	 * time intervals is better to avoid...
	 * Obviously on a LAN we reasonably will always have
	 * right_bound = left_bound + WESTWOOD_RTT_MIN
	 */
	if (w->rtt && delta > max_t(u32, w->rtt, westwood_rtt_min_jiffies())) {
		westwood_filter(w, delta);
		if (trace_westwood_tb_sample_enabled())
			westwood_trace_sample(sk, w, delta);

		w->bk = 0;
		w->rtt_win_sx = tcp_jiffies32;
	}
}

static inline void update_rtt_min(struct westwood *w)
{
	if (w->reset_rtt_min) {
		w->rtt_min = w->rtt;
		w->reset_rtt_min = 0;
	} else
		w->rtt_min = min(w->rtt, w->rtt_min);
}

/*
 * @westwood_fast_bw
 * It is called when we are in fast path. In particular it is called when
 * header prediction is successful. In such case in fact update is
 * straight forward and doesn't need any particular care.
 */
static inline void westwood_fast_bw(struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *w = inet_csk_ca(sk);

	westwood_update_window(sk);

	w->bk += tp->snd_una - w->snd_una;
	w->snd_una = tp->snd_una;
	update_rtt_min(w);
}

/*
 * @westwood_acked_count
 * This function evaluates cumul_ack for evaluating bk in case of
 * delayed or partial acks.
 */
static inline u32 westwood_acked_count(struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *w = inet_csk_ca(sk);

	w->cumul_ack = tp->snd_una - w->snd_una;

	/* If cumul_ack is 0 this is a dupack since it's not moving
	 * tp->snd_una.
	 */
	if (!w->cumul_ack) {
		w->accounted += tp->mss_cache;
		w->cumul_ack = tp->mss_cache;
	}

	if (w->cumul_ack > tp->mss_cache) {
		/* Partial or delayed ack */
		if (w->accounted >= w->cumul_ack) {
			w->accounted -= w->cumul_ack;
			w->cumul_ack = tp->mss_cache;
		} else {
			w->cumul_ack -= w->accounted;
			w->accounted = 0;
		}
	}

	w->snd_una = tp->snd_una;

	return w->cumul_ack;
}

/*
 * TCP Westwood
 * Here limit is evaluated as Bw estimation*RTTmin (for obtaining it
 * in packets we use mss_cache). Rttmin is guaranteed to be >= 2
 * so avoids ever returning 0.
 */
static u32 tcp_westwood_bw_rttmin(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	const struct westwood *w = inet_csk_ca(sk);

	return max_t(u32, (w->bw_est * w->rtt_min) / tp->mss_cache,
		     READ_ONCE(min_cwnd_segs));
}

static void tcp_westwood_ack(struct sock *sk, u32 ack_flags)
{
	if (ack_flags & CA_ACK_SLOWPATH) {
		struct westwood *w = inet_csk_ca(sk);

		westwood_update_window(sk);
		w->bk += westwood_acked_count(sk);

		update_rtt_min(w);
		return;
	}

	westwood_fast_bw(sk);
}

/* Mainline: .ssthresh = tcp_reno_ssthresh. Same value, plus a note. */
static u32 tcp_westwood_ssthresh(struct sock *sk)
{
	struct westwood *w = inet_csk_ca(sk);

	wtb_note_reduction(sk, &w->note);
	return tcp_reno_ssthresh(sk);
}

/* Mainline: .undo_cwnd = tcp_reno_undo_cwnd. Same value, plus an event. */
static u32 tcp_westwood_undo_cwnd(struct sock *sk)
{
	const struct westwood *w = inet_csk_ca(sk);
	u32 cwnd = tcp_reno_undo_cwnd(sk);

	wtb_trace_undo(sk, WTB_VARIANT_ML, cwnd, westwood_est_Bps(w),
		       jiffies_to_usecs(w->rtt_min));
	return cwnd;
}

/* Not in mainline: only emits the trace event. */
static void tcp_westwood_state(struct sock *sk, u8 new_state)
{
	struct westwood *w = inet_csk_ca(sk);

	wtb_trace_state(sk, &w->note, WTB_VARIANT_ML, new_state,
			westwood_est_Bps(w), jiffies_to_usecs(w->rtt_min));
}

static void tcp_westwood_event(struct sock *sk, enum tcp_ca_event event)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *w = inet_csk_ca(sk);
	u32 cwnd_before, ssthresh_before;

	switch (event) {
	case CA_EVENT_COMPLETE_CWR:
		/* tcp_end_cwnd_reduction() has already set cwnd = ssthresh
		 * (Reno's half) unless the reduction was undone.
		 */
		cwnd_before = tcp_snd_cwnd(tp);
		ssthresh_before = tp->snd_ssthresh;
		tp->snd_ssthresh = tcp_westwood_bw_rttmin(sk);
		tcp_snd_cwnd_set(tp, tp->snd_ssthresh);
		wtb_trace_cong(sk, WTB_VARIANT_ML, WTB_CONG_COMPLETE_CWR,
			       cwnd_before, ssthresh_before,
			       westwood_est_Bps(w), jiffies_to_usecs(w->rtt_min));
		break;
	case CA_EVENT_LOSS:
		tp->snd_ssthresh = tcp_westwood_bw_rttmin(sk);
		/* Update RTT_min when next ack arrives */
		w->reset_rtt_min = 1;
		/* the event follows in ->set_state(TCP_CA_Loss) */
		break;
	default:
		/* don't care */
		break;
	}
}

/* Extract info for Tcp socket info provided via netlink. */
static size_t tcp_westwood_info(struct sock *sk, u32 ext, int *attr,
				union tcp_cc_info *info)
{
	const struct westwood *ca = inet_csk_ca(sk);

	return wtb_get_info(ext, attr, info, westwood_est_Bps(ca),
			    jiffies_to_usecs(ca->rtt),
			    jiffies_to_usecs(ca->rtt_min));
}

static struct tcp_congestion_ops tcp_westwood __read_mostly = {
	.init		= tcp_westwood_init,
	.ssthresh	= tcp_westwood_ssthresh,
	.cong_avoid	= tcp_reno_cong_avoid,
	.undo_cwnd      = tcp_westwood_undo_cwnd,
	.set_state	= tcp_westwood_state,
	.cwnd_event	= tcp_westwood_event,
	.in_ack_event	= tcp_westwood_ack,
	.get_info	= tcp_westwood_info,
	.pkts_acked	= tcp_westwood_pkts_acked,

	.owner		= THIS_MODULE,
	.name		= "westwood_ml"
};

/* ======================================================================== */
/* westwood_paper: Westwood+ as specified in paper 000, sections 2.1-2.2.
 *
 * Bandwidth samples (2.2): "b_k = d_k / Delta_k is computed every RTT, where
 * d_k is the amount of data acknowledged during the last RTT = Delta_k",
 * counted so that "a duplicate ACK counts for one delivered segment, a
 * delayed ACK for two segments, a cumulative ACK counts for one segment or
 * for the number of segments exceeding those already accounted for by
 * previous duplicate acknowledgements". That is exactly what Linux keeps in
 * tp->delivered (segments that reached the receiver):
 *   - with SACK, each newly SACKed segment is counted once when SACKed and
 *     not again when the cumulative ACK covers it (tcp_sacktag_write_queue,
 *     tcp_clean_rtx_queue), which is more exact than "one per DUPACK";
 *   - without SACK, tcp_add_reno_sack() counts one segment per DUPACK and
 *     tcp_remove_reno_sacks() counts a cumulative ACK as
 *     max(acked - dupacks already counted, 1): the paper's rule;
 *   - a delayed or stretch ACK counts every segment it covers.
 * So d_k = (segments delivered in the window) * mss_cache, in bytes.
 * Timing: ->in_ack_event runs after tcp_clean_rtx_queue() in 6.1 and 6.12,
 * so SACKed and cumulatively ACKed segments of the current ACK are counted
 * in it; a non-SACK DUPACK is counted later in the same ACK
 * (tcp_fastretrans_alert) and so lands in d_k one ACK late.
 *
 * Delta_k: a window closes at the first ACK at least one smoothed RTT
 * (tp->srtt_us / 8) after it opened; Delta_k is the exact time between the
 * two ACKs (tp->tcp_mstamp, us). No 50 ms floor: the paper has none.
 *
 * Filter (2.2, eq. 1): BWE_k = alpha * BWE_k-1 + (1 - alpha) * b_k with
 * alpha = paper_alpha_permille / 1000. The paper gives no BWE_0; like
 * mainline, the first sample seeds the filter (starting from 0 would hold
 * BWE at 10% of the rate after the first RTT and make an early loss set
 * ssthresh to the floor).
 *
 * RTTmin (2.1): the smallest RTT sample of the connection (ack_sample.rtt_us,
 * in us), never reset. Mainline resets its rtt_min after an RTO; the paper
 * does not.
 *
 * Window setting (2.1 b, c) and where Linux makes an exact match impossible:
 *   - "3 DUPACKs": ->ssthresh() is called by tcp_enter_recovery(). Linux
 *     enters recovery on dupthresh DUPACKs (3) without SACK, but with SACK
 *     also when RACK marks a segment lost by time, and TLP may repair a
 *     single loss without recovery at all (then: CWR). For the papers'
 *     trigger run with net.ipv4.tcp_sack=0 or net.ipv4.tcp_recovery=0 (no
 *     RACK) and net.ipv4.tcp_early_retrans=0 (no TLP).
 *   - "cwnd = ssthresh": during recovery cwnd belongs to PRR (RFC 6937,
 *     tcp_cwnd_reduction(), no switch), which rewrites cwnd on every ACK;
 *     setting it here would be undone on the same ACK. PRR brings the data
 *     in flight down to ssthresh within the recovery round trip, sending
 *     ssthresh/prior_cwnd segments per segment delivered instead of pausing
 *     and then sending one per DUPACK as NewReno does with cwnd = ssthresh;
 *     both have about ssthresh segments in flight at its end, and at the exit
 *     tcp_end_cwnd_reduction() sets cwnd = ssthresh. The value is computed
 *     once, at entry (the paper's instant), not again at COMPLETE_CWR as
 *     mainline does. The only alternative, ->cong_control, takes all of
 *     cwnd away from Linux (see above) and would change the Reno part too.
 *   - "coarse timeout: ssthresh as before, cwnd = 1": tcp_enter_loss() calls
 *     ->ssthresh() (only once per loss episode; further RTOs keep ssthresh)
 *     and sets cwnd = packets in flight + 1, which is 1 after an RTO has
 *     marked everything lost. Exact.
 *   - ECN / local congestion (CWR) is not in the paper: the same
 *     ssthresh = BWE*RTTmin is used.
 *   - Undo (DSACK, timestamps, F-RTO: net.ipv4.tcp_frto) is not in the
 *     paper: Reno's undo is kept, as mainline does, so that both variants
 *     react to spurious retransmissions alike; it is traced as "undo".
 *   - The increase is Reno's (2.1 a): tcp_reno_cong_avoid(), i.e. slow start
 *     with appropriate byte counting and cwnd += 1 per RTT.
 */

struct westwood_paper {
	u64	win_start_us;	/* tp->tcp_mstamp at the ACK that opened the window */
	u64	win_bytes;	/* d_k so far: bytes delivered in this window */
	u64	bw_est;		/* BWE, bytes/s */
	u32	delivered;	/* tp->delivered at the last ACK */
	u32	rtt_min_us;	/* RTTmin; U32_MAX until the first sample */
	struct wtb_cong_note note;
	u8	window_open;	/* first ACK seen, window running */
	u8	filter_primed;	/* BWE holds at least one sample */
};

static u32 westwood_paper_rtt_min_diag(const struct westwood_paper *w)
{
	return w->rtt_min_us == U32_MAX ? 0 : w->rtt_min_us;
}

static void westwood_paper_init(struct sock *sk)
{
	struct westwood_paper *w = inet_csk_ca(sk);

	w->win_start_us = 0;
	w->win_bytes = 0;
	w->bw_est = 0;
	w->delivered = 0;
	w->rtt_min_us = U32_MAX;
	w->note.pending = 0;
	w->window_open = 0;
	w->filter_primed = 0;
}

/* max(min_cwnd_segs, BWE * RTTmin / seg_size), paper 000 sec. 2.1 b and c. */
static u32 westwood_paper_bw_rttmin(const struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	const struct westwood_paper *w = inet_csk_ca(sk);
	u32 floor = READ_ONCE(min_cwnd_segs);
	u64 bdp_bytes, segs;

	if (w->rtt_min_us == U32_MAX)
		return floor;

	bdp_bytes = mul_u64_u32_div(w->bw_est, w->rtt_min_us, USEC_PER_SEC);
	segs = div_u64(bdp_bytes, tp->mss_cache);
	return clamp_t(u64, segs, floor, max(floor, tp->snd_cwnd_clamp));
}

static void westwood_paper_pkts_acked(struct sock *sk,
				      const struct ack_sample *sample)
{
	struct westwood_paper *w = inet_csk_ca(sk);

	if (sample->rtt_us > 0)
		w->rtt_min_us = min_t(u32, w->rtt_min_us, sample->rtt_us);
}

static void westwood_paper_ack(struct sock *sk, u32 ack_flags)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct westwood_paper *w = inet_csk_ca(sk);
	u32 srtt_us = tp->srtt_us >> 3;
	u32 alpha, win_us;
	u64 sample_Bps;

	if (!w->window_open) {
		w->win_start_us = tp->tcp_mstamp;
		w->delivered = tp->delivered;
		w->win_bytes = 0;
		w->window_open = 1;
		return;
	}

	w->win_bytes += (u64)(tp->delivered - w->delivered) * tp->mss_cache;
	w->delivered = tp->delivered;

	win_us = min_t(u64, tp->tcp_mstamp - w->win_start_us, U32_MAX);
	if (!srtt_us || win_us < srtt_us)
		return;

	sample_Bps = div_u64(w->win_bytes * USEC_PER_SEC, win_us);
	if (w->filter_primed) {
		alpha = READ_ONCE(paper_alpha_permille);
		w->bw_est = div_u64(alpha * w->bw_est +
				    (1000 - alpha) * sample_Bps, 1000);
	} else {
		w->bw_est = sample_Bps;
		w->filter_primed = 1;
	}

	trace_westwood_tb_sample(sk, WTB_VARIANT_PAPER, w->win_bytes, win_us,
				 sample_Bps, w->bw_est, srtt_us,
				 w->rtt_min_us);

	w->win_start_us = tp->tcp_mstamp;
	w->win_bytes = 0;
}

/* 3 DUPACKs (recovery), coarse timeout (loss) and CWR all land here. */
static u32 westwood_paper_ssthresh(struct sock *sk)
{
	struct westwood_paper *w = inet_csk_ca(sk);

	wtb_note_reduction(sk, &w->note);
	return westwood_paper_bw_rttmin(sk);
}

static u32 westwood_paper_undo_cwnd(struct sock *sk)
{
	const struct westwood_paper *w = inet_csk_ca(sk);
	u32 cwnd = tcp_reno_undo_cwnd(sk);

	wtb_trace_undo(sk, WTB_VARIANT_PAPER, cwnd, w->bw_est,
		       westwood_paper_rtt_min_diag(w));
	return cwnd;
}

static void westwood_paper_state(struct sock *sk, u8 new_state)
{
	struct westwood_paper *w = inet_csk_ca(sk);

	wtb_trace_state(sk, &w->note, WTB_VARIANT_PAPER, new_state, w->bw_est,
			westwood_paper_rtt_min_diag(w));
}

static void westwood_paper_event(struct sock *sk, enum tcp_ca_event event)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	const struct westwood_paper *w = inet_csk_ca(sk);

	/* Nothing to decide: ssthresh was set at entry, and cwnd = ssthresh
	 * was just done by tcp_end_cwnd_reduction(). Traced so that both
	 * variants show the end of every reduction.
	 */
	if (event == CA_EVENT_COMPLETE_CWR)
		wtb_trace_cong(sk, WTB_VARIANT_PAPER, WTB_CONG_COMPLETE_CWR,
			       tcp_snd_cwnd(tp), tp->snd_ssthresh, w->bw_est,
			       westwood_paper_rtt_min_diag(w));
}

static size_t westwood_paper_info(struct sock *sk, u32 ext, int *attr,
				  union tcp_cc_info *info)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	const struct westwood_paper *w = inet_csk_ca(sk);

	return wtb_get_info(ext, attr, info, w->bw_est, tp->srtt_us >> 3,
			    westwood_paper_rtt_min_diag(w));
}

static struct tcp_congestion_ops tcp_westwood_paper __read_mostly = {
	.init		= westwood_paper_init,
	.ssthresh	= westwood_paper_ssthresh,
	.cong_avoid	= tcp_reno_cong_avoid,
	.undo_cwnd	= westwood_paper_undo_cwnd,
	.set_state	= westwood_paper_state,
	.cwnd_event	= westwood_paper_event,
	.in_ack_event	= westwood_paper_ack,
	.get_info	= westwood_paper_info,
	.pkts_acked	= westwood_paper_pkts_acked,

	.owner		= THIS_MODULE,
	.name		= "westwood_paper"
};

/* ======================================================================== */

static int __init tcp_westwood_tb_register(void)
{
	int ret;

	BUILD_BUG_ON(sizeof(struct westwood) > ICSK_CA_PRIV_SIZE);
	BUILD_BUG_ON(sizeof(struct westwood_paper) > ICSK_CA_PRIV_SIZE);

	ret = tcp_register_congestion_control(&tcp_westwood);
	if (ret)
		return ret;
	ret = tcp_register_congestion_control(&tcp_westwood_paper);
	if (ret)
		tcp_unregister_congestion_control(&tcp_westwood);
	return ret;
}

static void __exit tcp_westwood_tb_unregister(void)
{
	tcp_unregister_congestion_control(&tcp_westwood_paper);
	tcp_unregister_congestion_control(&tcp_westwood);
}

module_init(tcp_westwood_tb_register);
module_exit(tcp_westwood_tb_unregister);

MODULE_AUTHOR("Stephen Hemminger, Angelo Dell'Aera (tcp_westwood.c); cc-testbed (instrumentation, paper variant)");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("TCP Westwood+ for the cc-testbed: westwood_ml (mainline decisions) and westwood_paper (paper 000 sec. 2), with trace events");
MODULE_VERSION(WESTWOOD_TB_VERSION);
/* Setting an unknown CC (sysctl, setsockopt, ip route congctl) makes the
 * kernel request_module("tcp_<name>"): load this module for both names.
 */
MODULE_ALIAS("tcp_westwood_ml");
MODULE_ALIAS("tcp_westwood_paper");
