package ata

// State is where the device is in the command protocol (ATA/ATAPI-7 vol. 2
// §9, the device-side protocol state diagrams, folded into one machine).
type State uint8

// States. The status register's BSY and DRQ bits follow the state: BSY in
// StateBusy and StateReset, DRQ in StatePIOIn, StatePIOOut and StateDMA,
// neither in StateIdle.
const (
	// StateIdle: no command; the host may write the task file and a
	// command.
	StateIdle State = iota
	// StateBusy: BSY. The device executes a command or moves a block to or
	// from the backend.
	StateBusy
	// StatePIOIn: DRQ. A block waits in the device for the host to read
	// through the data register.
	StatePIOIn
	// StatePIOOut: DRQ. The device waits for the host to write a block
	// through the data register.
	StatePIOOut
	// StateDMA: DRQ. The DMA engine moves the data phase.
	StateDMA
	// StateReset: SRST is set; BSY until the host clears it.
	StateReset
)

var stateNames = [...]string{"idle", "busy", "PIO in", "PIO out", "DMA", "reset"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + hex8(uint8(s)) + ")"
}

// Event is what moves the device from one State to the next.
type Event uint8

// Events.
const (
	// EvCommand: the host wrote the command register.
	EvCommand Event = iota
	// EvDataIn: a PIO block is ready for the host.
	EvDataIn
	// EvDataOut: the device is ready for a PIO block from the host.
	EvDataOut
	// EvBlockDone: the host has moved the whole PIO block.
	EvBlockDone
	// EvDMA: the data phase is handed to the DMA engine.
	EvDMA
	// EvDMADone: the DMA engine returned.
	EvDMADone
	// EvComplete: the command ended, with success or error.
	EvComplete
	// EvSRST: the host set SRST in the device control register.
	EvSRST
	// EvSRSTRelease: the host cleared SRST; the device runs its diagnostic.
	EvSRSTRelease
)

var eventNames = [...]string{"command", "data-in", "data-out", "block-done", "dma", "dma-done", "complete", "srst", "srst-release"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "event(" + hex8(uint8(e)) + ")"
}

// Transition is the device's state machine: the state after e in s, or a
// *TransitionError when the machine has no such edge. SRST takes every
// state to StateReset.
//
//	idle    --command-->      busy
//	busy    --data-in-->      PIO in    --block-done--> busy
//	busy    --data-out-->     PIO out   --block-done--> busy
//	busy    --dma-->          DMA       --dma-done-->   busy
//	busy    --complete-->     idle
//	any     --srst-->         reset     --srst-release--> idle
func Transition(s State, e Event) (State, error) {
	if e == EvSRST && s <= StateReset {
		return StateReset, nil
	}
	switch s {
	case StateIdle:
		if e == EvCommand {
			return StateBusy, nil
		}
	case StateBusy:
		switch e {
		case EvDataIn:
			return StatePIOIn, nil
		case EvDataOut:
			return StatePIOOut, nil
		case EvDMA:
			return StateDMA, nil
		case EvComplete:
			return StateIdle, nil
		}
	case StatePIOIn, StatePIOOut:
		if e == EvBlockDone {
			return StateBusy, nil
		}
	case StateDMA:
		if e == EvDMADone {
			return StateBusy, nil
		}
	case StateReset:
		if e == EvSRSTRelease {
			return StateIdle, nil
		}
	}
	return s, &TransitionError{State: s, Event: e}
}
