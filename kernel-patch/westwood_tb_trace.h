/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Trace events of tcp_westwood_tb (trace system "westwood_tb").
 *
 *   /sys/kernel/tracing/events/westwood_tb/westwood_tb_sample/  one per bandwidth sample
 *   /sys/kernel/tracing/events/westwood_tb/westwood_tb_cong/    one per congestion event
 *
 * Units are in the field names: _bytes, _us, _Bps (bytes per second), cwnd and
 * ssthresh in segments. sport/dport are host order, as the tcp:tcp_probe event
 * shows them, so a flow is picked the same way in both.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM westwood_tb

#if !defined(_WESTWOOD_TB_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _WESTWOOD_TB_TRACE_H

#include <linux/tracepoint.h>
#include <linux/tcp.h>
#include <net/inet_sock.h>
#include <net/tcp.h>

#ifndef _WESTWOOD_TB_TRACE_CONSTANTS
#define _WESTWOOD_TB_TRACE_CONSTANTS
/* Plain #defines, not an enum: __print_symbolic() then needs no TRACE_DEFINE_ENUM
 * and the event's format file shows the numbers user space has to match.
 */
#define WTB_VARIANT_ML		0	/* westwood_ml */
#define WTB_VARIANT_PAPER	1	/* westwood_paper */

#define WTB_CONG_RECOVERY	0	/* entering fast recovery (3 DUPACKs, SACK, RACK) */
#define WTB_CONG_CWR		1	/* entering CWR: ECN, local congestion, TLP repair */
#define WTB_CONG_COMPLETE_CWR	2	/* end of recovery/CWR (CA_EVENT_COMPLETE_CWR) */
#define WTB_CONG_LOSS		3	/* coarse timeout (RTO) that reduced ssthresh */
#define WTB_CONG_LOSS_REPEAT	4	/* further RTO of the same episode: ssthresh kept */
#define WTB_CONG_UNDO		5	/* reduction undone (DSACK, timestamps, F-RTO) */
#endif

#define wtb_show_variant(v)					\
	__print_symbolic(v,					\
			 { WTB_VARIANT_ML,	"ml" },		\
			 { WTB_VARIANT_PAPER,	"paper" })

#define wtb_show_cong_kind(k)						\
	__print_symbolic(k,						\
			 { WTB_CONG_RECOVERY,		"recovery" },	\
			 { WTB_CONG_CWR,		"cwr" },	\
			 { WTB_CONG_COMPLETE_CWR,	"complete_cwr" }, \
			 { WTB_CONG_LOSS,		"loss" },	\
			 { WTB_CONG_LOSS_REPEAT,	"loss_repeat" }, \
			 { WTB_CONG_UNDO,		"undo" })

TRACE_EVENT(westwood_tb_sample,

	TP_PROTO(const struct sock *sk, u8 variant, u64 acked_bytes, u32 win_us,
		 u64 sample_Bps, u64 est_Bps, u32 rtt_us, u32 rtt_min_us),

	TP_ARGS(sk, variant, acked_bytes, win_us, sample_Bps, est_Bps, rtt_us,
		rtt_min_us),

	TP_STRUCT__entry(
		__field(u8,	variant)
		__field(u16,	sport)
		__field(u16,	dport)
		__field(u64,	acked_bytes)
		__field(u32,	win_us)
		__field(u64,	sample_Bps)
		__field(u64,	est_Bps)
		__field(u32,	rtt_us)
		__field(u32,	rtt_min_us)
		__field(u32,	cwnd)
		__field(u32,	ssthresh)
	),

	TP_fast_assign(
		const struct inet_sock *inet = inet_sk(sk);
		const struct tcp_sock *tp = tcp_sk(sk);

		__entry->variant	= variant;
		__entry->sport		= ntohs(inet->inet_sport);
		__entry->dport		= ntohs(inet->inet_dport);
		__entry->acked_bytes	= acked_bytes;
		__entry->win_us		= win_us;
		__entry->sample_Bps	= sample_Bps;
		__entry->est_Bps	= est_Bps;
		__entry->rtt_us		= rtt_us;
		__entry->rtt_min_us	= rtt_min_us;
		__entry->cwnd		= tcp_snd_cwnd(tp);
		__entry->ssthresh	= tp->snd_ssthresh;
	),

	TP_printk("variant=%s sport=%u dport=%u acked_bytes=%llu win_us=%u sample_Bps=%llu est_Bps=%llu rtt_us=%u rtt_min_us=%u cwnd=%u ssthresh=%u",
		  wtb_show_variant(__entry->variant),
		  __entry->sport, __entry->dport,
		  __entry->acked_bytes, __entry->win_us,
		  __entry->sample_Bps, __entry->est_Bps,
		  __entry->rtt_us, __entry->rtt_min_us,
		  __entry->cwnd, __entry->ssthresh)
);

TRACE_EVENT(westwood_tb_cong,

	TP_PROTO(const struct sock *sk, u8 variant, u8 kind,
		 u32 cwnd_before, u32 cwnd_after,
		 u32 ssthresh_before, u32 ssthresh_after,
		 u64 est_Bps, u32 rtt_min_us),

	TP_ARGS(sk, variant, kind, cwnd_before, cwnd_after, ssthresh_before,
		ssthresh_after, est_Bps, rtt_min_us),

	TP_STRUCT__entry(
		__field(u8,	variant)
		__field(u8,	kind)
		__field(u16,	sport)
		__field(u16,	dport)
		__field(u32,	cwnd_before)
		__field(u32,	cwnd_after)
		__field(u32,	ssthresh_before)
		__field(u32,	ssthresh_after)
		__field(u64,	est_Bps)
		__field(u32,	rtt_min_us)
	),

	TP_fast_assign(
		const struct inet_sock *inet = inet_sk(sk);

		__entry->variant	 = variant;
		__entry->kind		 = kind;
		__entry->sport		 = ntohs(inet->inet_sport);
		__entry->dport		 = ntohs(inet->inet_dport);
		__entry->cwnd_before	 = cwnd_before;
		__entry->cwnd_after	 = cwnd_after;
		__entry->ssthresh_before = ssthresh_before;
		__entry->ssthresh_after	 = ssthresh_after;
		__entry->est_Bps	 = est_Bps;
		__entry->rtt_min_us	 = rtt_min_us;
	),

	TP_printk("variant=%s kind=%s sport=%u dport=%u cwnd_before=%u cwnd_after=%u ssthresh_before=%u ssthresh_after=%u est_Bps=%llu rtt_min_us=%u",
		  wtb_show_variant(__entry->variant),
		  wtb_show_cong_kind(__entry->kind),
		  __entry->sport, __entry->dport,
		  __entry->cwnd_before, __entry->cwnd_after,
		  __entry->ssthresh_before, __entry->ssthresh_after,
		  __entry->est_Bps, __entry->rtt_min_us)
);

#endif /* _WESTWOOD_TB_TRACE_H */

/* Kbuild adds -I$(src), so "." finds this file from <trace/define_trace.h>. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE westwood_tb_trace
#include <trace/define_trace.h>
