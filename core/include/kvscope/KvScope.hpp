// Start here: KV Scope's core (kvscope_core, no Qt, no torch types in any public header).
// The entry points, in the order a front end uses them, and their threading:
//
//   Load        Model::load(dir)                  Model.hpp      a checkpoint + config
//               Tokenizer::loadFromDirectory(dir) Tokenizer.hpp  tokenizer.json / vocab+merges / .model
//               TraceFile::read(path)             TraceFile.hpp  a .kvtrace from any engine
//   Run         Engine(model).run(requests, opt)  Engine.hpp     the built-in cached engine,
//                                                                faults (FaultSpec.hpp), a Trace
//   Audit       runAuditJob(spec)                 AuditJob.hpp   load + run + audit in one call
//               Auditor::audit / auditTraces      Auditor.hpp    the six stages (AuditStages.hpp)
//                                                                -> AuditResult (AuditResult.hpp)
//                                                                   with the AuditReport value
//                                                                   (AuditReport.hpp, findings
//                                                                   named by FailureMatrix.hpp)
//   Inspect     Inspector(output)                 Inspection.hpp what a front end shows of one
//                                                                step: StepView, RequestTimeline
//   Reproduce   minimizeAudit(...)                TraceMinimizer.hpp  the smallest trace that
//                                                                still shows the first finding
//
// Threading. Everything here is synchronous and runs on the caller's thread. A Model is
// immutable after loading and may be shared by reads; an Engine run, an audit and an
// Inspector's view() each belong to one thread at a time (the GUI runs them all on its
// one engine thread and hands results to the GUI thread as shared pointers to const
// values). Long calls poll AuditOptions::cancelled / EngineOptions::cancelled and throw
// AuditCancelled (Error.hpp).
//
// Errors. Bad input throws InputError naming the file and the field, a request that
// cannot be honoured throws UsageError (Error.hpp); nothing the caller gave is modified.
// docs/api.md says the same with examples.
#pragma once

#include "kvscope/AuditJob.hpp"
#include "kvscope/AuditReport.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/AuditStages.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/Inspection.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Tokenizer.hpp"
#include "kvscope/Trace.hpp"
#include "kvscope/TraceFile.hpp"
